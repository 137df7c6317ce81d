package dialecttest

import "testing"

// RunBucketMode runs, on a bucket-mode dialect (relay.claimMode: buckets),
// the tests of Run whose properties hold in every claim mode: exclusive
// claims, per-key order, out-of-sequence commits, scheduling, retry, dead,
// release, headers, keys, the window and the sweep, and the operator
// surface that does not count rows in flight. A claimed row stays pending
// in bucket mode and there is no row lease, so the tests of Run that look
// for processing rows or leases are not run; the dialect's own tests cover
// the ownership of buckets, which stands in for them.
func RunBucketMode(t *testing.T, newHarness func(t *testing.T) Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"ExclusiveClaims", testExclusiveClaims},
		{"PerKeyOrder", testPerKeyOrder},
		{"CommitOutOfSequenceOrder", testCommitOutOfSequenceOrder},
		{"FutureScheduledNotClaimed", testFutureScheduled},
		{"Retry", testRetry},
		{"Dead", testDead},
		{"ReleaseSpendsNoAttempt", testRelease},
		{"MalformedHeaders", testMalformedHeaders},
		{"OneRowPerKeyPerClaim", testOneRowPerKey},
		{"NullAndEmptyKeysUnordered", testUnkeyed},
		{"EmptyInputs", testEmptyInputs},
		{"ClaimWindow", testClaimWindow},
		{"ClaimSweep", testClaimSweep},
		{"InspectDeadList", testDeadList},
		{"InspectReplay", testReplay},
		{"InspectReplaySent", testReplaySent},
		{"InspectReplayTopics", testReplayTopics},
		{"InspectReplayProgress", testReplayProgress},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newHarness(t))
		})
	}
}
