package dialecttest

import "testing"

// RunBucketMode runs, on a bucket-mode dialect (relay.claimMode: buckets),
// the tests of Run whose properties hold in every claim mode: exclusive
// claims, per-key order, out-of-sequence commits, scheduling, retry, dead,
// release, headers, keys, the window and the sweep, and the operator
// surface. A claimed row stays pending in bucket mode and there is no row
// lease, so the tests that look at processing rows or leases are left
// out; the dialect's own tests cover the ownership of buckets, which
// stands in for them.
func RunBucketMode(t *testing.T, newHarness func(t *testing.T) Harness) {
	runTests(t, newHarness, deliveryTests, false)
	runTests(t, newHarness, inspectorTests, false)
}
