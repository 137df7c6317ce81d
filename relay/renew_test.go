package relay

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
)

// blockUntilCut publishes nothing until its context ends, and records when.
type blockUntilCut struct{ ended chan time.Time }

func (b blockUntilCut) Publish(ctx context.Context, _ []outbox.Message) error {
	select {
	case <-ctx.Done():
		b.ended <- time.Now()
		return ctx.Err()
	case <-time.After(30 * time.Second):
		return nil
	}
}
func (blockUntilCut) Close() error { return nil }

// publishUntilCut runs an engine on db (whose first claim holds the rows)
// with a publish that blocks until it is cut, and returns when the publish
// was cut, measured from when the claim was asked; the engine runs on
// until the test ends.
func publishUntilCut(t *testing.T, db dialect.Dialect, fake *fakeDialect, lease time.Duration) time.Duration {
	t.Helper()
	dest := blockUntilCut{ended: make(chan time.Time, 1)}
	e := newTestEngine(t, db, map[string]destination.Destination{"d": dest}, Options{Lease: lease, ShutdownTimeout: 200 * time.Millisecond})
	runEngine(t, e)
	var ended time.Time
	select {
	case ended = <-dest.ended:
	case <-time.After(10 * lease):
		t.Fatalf("the publish went on for %v, ten leases, with the lease not kept", 10*lease)
	}
	return ended.Sub(fake.state().claimedAt[0])
}

// TestUnrenewableLeaseStopsThePublishInTime: a relay whose renewals all
// fail (it cannot reach its database, while other relays can) stops the
// publish before the lease it last confirmed expires: once it has, another
// relay's reaper returns the rows to pending and that relay delivers them
// and the key's next row, and a copy published after that arrives out of
// order. The rows are released, without spending an attempt.
func TestUnrenewableLeaseStopsThePublishInTime(t *testing.T) {
	t.Parallel()
	const lease = 1200 * time.Millisecond
	db := &fakeDialect{
		batches: [][]outbox.Message{rows("d", "r", 2)},
		renewFn: func() (int64, error) { return 0, errors.New("connection refused") },
	}
	took := publishUntilCut(t, db, db, lease)
	// The publish stops Lease/leaseMargin before the lease expires (1 s
	// here); it must not outlast the lease, nor stop at the first failed
	// renewal (400 ms).
	if took >= lease || took < lease/2 {
		t.Errorf("the publish was stopped %v after the claim; want within the %v lease, not before half of it", took, lease)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return len(db.state().released) == 2 }, "the rows were not released")
	if s := db.state(); s.renewals < 2 || len(s.retries) != 0 {
		t.Errorf("%d renewals tried before the publish stopped, retried %v; want the failures retried, no attempt spent", s.renewals, s.retries)
	}
}

// TestPartlyRenewedLeaseStopsThePublish: a renewal that finds only some of
// the claim's rows still held (the others were reclaimed after their lease
// expired, and another relay delivers them) stops the publish, as one that
// finds none does (TestLeaseLostStopsThePublish).
func TestPartlyRenewedLeaseStopsThePublish(t *testing.T) {
	t.Parallel()
	const lease = 600 * time.Millisecond
	db := &fakeDialect{
		batches: [][]outbox.Message{rows("d", "r", 2)},
		renewFn: func() (int64, error) { return 1, nil },
	}
	if took := publishUntilCut(t, db, db, lease); took >= lease {
		t.Errorf("the publish was stopped %v after the claim; want at the first renewal (%v)", took, lease/3)
	}
	// The fenced release leaves the reclaimed row alone in a real table.
	testenv.Eventually(t, 5*time.Second, func() bool { return len(db.state().released) == 2 }, "the rows were not released")
	if s := db.state(); len(s.retries) != 0 {
		t.Errorf("retried %v; want the rows released, no attempt spent", s.retries)
	}
}

// slowPublish takes d to publish, unless its context ends first, and
// records how each publish ended.
type slowPublish struct {
	d     time.Duration
	ended chan error
}

func (s *slowPublish) Publish(ctx context.Context, _ []outbox.Message) error {
	var err error
	select {
	case <-ctx.Done():
		err = ctx.Err()
	case <-time.After(s.d):
	}
	s.ended <- err
	return err
}
func (*slowPublish) Close() error { return nil }

// TestRenewedLeaseKeepsThePublish: renewals that succeed keep a publish
// going for longer than the lease.
func TestRenewedLeaseKeepsThePublish(t *testing.T) {
	t.Parallel()
	const lease = 300 * time.Millisecond
	db := &fakeDialect{batches: [][]outbox.Message{rows("d", "r", 1)}}
	dest := &slowPublish{d: 4 * lease, ended: make(chan error, 1)}
	e := newTestEngine(t, db, map[string]destination.Destination{"d": dest}, Options{Lease: lease})
	runEngine(t, e)
	if err := <-dest.ended; err != nil {
		t.Errorf("publish error %v; want the publish to finish under renewed leases", err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return len(db.state().completed) == 1 }, "the row was not completed")
	if s := db.state(); len(s.released) != 0 || s.renewals < 3 {
		t.Errorf("released %v after %d renewals; want the row sent under renewed leases", s.released, s.renewals)
	}
}

// TestSlowClaimConfirmsItsLeaseFirst: a claim that took more than half the
// lease renews it once before publishing, so that the publish is not cut
// for a lease the count from the claim's start would call nearly spent;
// when that renewal fails, nothing is published and the rows are released
// without spending an attempt.
func TestSlowClaimConfirmsItsLeaseFirst(t *testing.T) {
	const lease = 600 * time.Millisecond
	for _, tc := range []struct {
		name      string
		renew     func() (int64, error)
		published bool
	}{
		{"renewed", func() (int64, error) { return 1, nil }, true},
		{"not renewed", func() (int64, error) { return 0, errors.New("connection refused") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := &fakeDialect{batches: [][]outbox.Message{rows("d", "r", 1)}, renewFn: tc.renew, claimDelay: 2 * lease / 3}
			dest := &slowPublish{d: lease / 2, ended: make(chan error, 1)}
			e := newTestEngine(t, db, map[string]destination.Destination{"d": dest}, Options{Lease: lease})
			stop := runEngine(t, e)
			testenv.Eventually(t, 5*time.Second, func() bool {
				s := db.state()
				return len(s.completed)+len(s.released)+len(s.retries) == 1
			}, "the row was not settled")
			stop()
			s := db.state()
			if s.renewals < 1 {
				t.Errorf("no renewal after a claim that took 2/3 of the lease")
			}
			var calls int
			var err error
			select {
			case err = <-dest.ended:
				calls = 1
			default:
			}
			switch {
			case tc.published && (calls != 1 || err != nil || len(s.released) != 0 || len(s.completed) != 1):
				t.Errorf("publish calls %d (err %v), released %v, completed %v; want the row published whole, not cut", calls, err, s.released, s.completed)
			case !tc.published && (calls != 0 || len(s.released) != 1 || len(s.retries) != 0):
				t.Errorf("publish calls %d, released %v, retried %v; want nothing published and the row released", calls, s.released, s.retries)
			}
		})
	}
}

// TestClaimJustUnderHalfTheLeaseKeepsItsPublish: renewals are counted from
// the last confirmation, so a claim that took just under half the lease
// (no confirmation before the publish) renews soon after, with its full
// share of time, and a publish longer than the lease goes on.
func TestClaimJustUnderHalfTheLeaseKeepsItsPublish(t *testing.T) {
	t.Parallel()
	const lease = 1200 * time.Millisecond
	db := &fakeDialect{
		batches:    [][]outbox.Message{rows("d", "r", 1)},
		claimDelay: lease/2 - 10*time.Millisecond,
		renewDelay: 40 * time.Millisecond,
	}
	dest := &slowPublish{d: lease, ended: make(chan error, 1)}
	e := newTestEngine(t, db, map[string]destination.Destination{"d": dest}, Options{Lease: lease})
	runEngine(t, e)
	if err := <-dest.ended; err != nil {
		t.Errorf("publish error %v; want the publish to finish under renewed leases", err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return len(db.state().completed) == 1 }, "the row was not completed")
	if s := db.state(); len(s.released) != 0 || s.renewals < 2 {
		t.Errorf("released %v, %d renewals; want the publish to finish under renewed leases", s.released, s.renewals)
	}
}

// deadlined adds to a fake dialect a batch end fixed at a time after its
// claim, as lock mode's lock timeout does, whatever its renewals report.
type deadlined struct {
	*fakeDialect
	after time.Duration
}

func (d deadlined) BatchDeadline(string) (time.Time, bool) {
	s := d.state()
	if len(s.claimedAt) == 0 {
		return time.Time{}, false
	}
	return s.claimedAt[0].Add(d.after), true
}

var _ dialect.BatchDeadliner = deadlined{}

// TestBatchDeadlineStopsThePublish: a claim with a fixed end (lock mode:
// the lock timeout rolls it back, and another relay may then claim its
// rows) stops its publish before that end, though every renewal succeeds.
func TestBatchDeadlineStopsThePublish(t *testing.T) {
	t.Parallel()
	const lease, lockTimeout = 1200 * time.Millisecond, 600 * time.Millisecond
	db := &fakeDialect{batches: [][]outbox.Message{rows("d", "r", 1)}}
	took := publishUntilCut(t, lockModeDeadlined{lockMode{db}, deadlined{db, lockTimeout}}, db, lease)
	if took >= lockTimeout || took < lockTimeout/2 {
		t.Errorf("the publish was stopped %v after the claim; want before the batch's end (%v), not before half of it", took, lockTimeout)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return db.state().commits == 1 }, "the claim was not committed")
	if s := db.state(); len(s.released) != 1 || len(s.retries) != 0 {
		t.Errorf("released %v, retried %v; want the row released, no attempt spent", s.released, s.retries)
	}
}

// lockModeDeadlined is the fake in lock mode with a batch deadline.
type lockModeDeadlined struct {
	lockMode
	d deadlined
}

func (l lockModeDeadlined) BatchDeadline(token string) (time.Time, bool) {
	return l.d.BatchDeadline(token)
}

// TestCutPublishKeepsDeferredRowsDelay: a row deferred because its
// destination was unavailable is retried with its deferral delay and no
// attempt spent, even when its claim's publishing is cut (shutdown, or a
// lease that could not be kept), not released: released, it would be due
// again at once, and the next claim would take it to the destination that
// is down. Rows cut before an outcome are released.
func TestCutPublishKeepsDeferredRowsDelay(t *testing.T) {
	db := &fakeDialect{}
	e := newTestEngine(t, db, map[string]destination.Destination{"d": acceptAll{}},
		Options{Lease: time.Second, Backoff: Backoff{Base: 300 * time.Millisecond, Max: time.Second}})
	msgs := []outbox.Message{
		{ID: "deferred", Topic: "d", Attempt: 2, MaxAttempts: 5},
		{ID: "deferred-cut", Topic: "d", Attempt: 2, MaxAttempts: 5},
		{ID: "cut", Topic: "d", Attempt: 2, MaxAttempts: 5},
	}
	c := newClaim("tok", time.Now(), dialect.Claimed{Messages: msgs})
	down := outbox.Unavailable(errors.New("connection refused"))
	report := e.settle(e.log, c, []outcome{
		{claim: c, msg: &c.msgs[0], dest: "d", err: down, deferred: true},
		{claim: c, msg: &c.msgs[1], dest: "d", err: down, deferred: true, cut: true},
		{claim: c, msg: &c.msgs[2], dest: "d", err: context.Canceled, cut: true},
	})
	report(true)
	s := db.state()
	if len(s.retries) != 2 {
		t.Fatalf("retries %+v; want the two deferred rows retried", s.retries)
	}
	for _, id := range []string{"deferred", "deferred-cut"} {
		if it, ok := s.retryOf(id); !ok || it.Attempt != 2 || it.Delay <= 0 {
			t.Errorf("retry of %s: %+v (%v); want a delay and its attempt unchanged", id, it, ok)
		}
	}
	if len(s.released) != 1 || s.released[0] != "cut" {
		t.Errorf("released %v; want only the row cut before an outcome", s.released)
	}
}
