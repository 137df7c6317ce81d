package relay

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

// renewingDialect claims msgs once; its renewals answer renew, and it
// records the rows released and retried.
type renewingDialect struct {
	lockDialect
	renew    func() (int64, error)
	delay    time.Duration // each renewal takes this long, unless its context ends first
	mu       sync.Mutex
	released []string
	renewals int
}

func (d *renewingDialect) Renew(ctx context.Context, _ dialect.RenewParams) (int64, error) {
	d.mu.Lock()
	d.renewals++
	d.mu.Unlock()
	select {
	case <-time.After(d.delay):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return d.renew()
}

func (d *renewingDialect) Release(_ context.Context, p dialect.ReleaseParams) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.released = append(d.released, p.IDs...)
	return int64(len(p.IDs)), nil
}

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

// runOneBatch claims and delivers one batch of db with a publish that
// blocks until it is cut, and returns when the publish was cut, measured
// from the start of the claim.
func runOneBatch(t *testing.T, db dialect.Dialect, lease time.Duration) time.Duration {
	t.Helper()
	dest := blockUntilCut{ended: make(chan time.Time, 1)}
	e, err := New(db, toDest{}, map[string]destination.Destination{"d": dest}, Options{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		_, _, _, _ = e.runBatch(context.Background(), e.log, false)
	}()
	var ended time.Time
	select {
	case ended = <-dest.ended:
	case <-time.After(10 * lease):
		t.Fatalf("the publish went on for %v, ten leases, with the lease not kept", 10*lease)
	}
	<-done
	return ended.Sub(start)
}

// TestUnrenewableLeaseStopsThePublishInTime: a relay whose renewals all
// fail (it cannot reach its database, while other relays can) stops the
// publish before the lease it last confirmed expires: once it has, another
// relay's reaper returns the rows to pending and that relay delivers them
// and the key's next row, and a copy published after that arrives out of
// order. Before, failed renewals were retried for as long as the publish
// lasted. The rows are released, without spending an attempt.
func TestUnrenewableLeaseStopsThePublishInTime(t *testing.T) {
	const lease = 3 * time.Second
	db := &renewingDialect{
		lockDialect: lockDialect{msgs: []outbox.Message{{ID: "a", Topic: "t", Key: "k", MaxAttempts: 5}, {ID: "b", Topic: "t", Key: "j", MaxAttempts: 5}}},
		renew:       func() (int64, error) { return 0, errors.New("connection refused") },
	}
	took := runOneBatch(t, leaseMode{db}, lease)
	// The publish stops Lease/leaseMargin before the lease expires (2.5 s
	// here); it must not outlast the lease, nor stop at the first failed
	// renewal (1 s).
	if took >= lease || took < lease/2 {
		t.Errorf("the publish was stopped %v after the claim; want within the %v lease, not before half of it", took, lease)
	}
	if db.renewals < 2 {
		t.Errorf("%d renewals tried before the publish stopped; want the failures retried", db.renewals)
	}
	if len(db.released) != 2 || len(db.retries) != 0 {
		t.Errorf("released %v, retried %v; want both rows released, no attempt spent", db.released, db.retries)
	}
}

// TestPartlyRenewedLeaseStopsThePublish: a renewal that finds only some of
// the batch's rows still held (the others were reclaimed after their lease
// expired, and another relay delivers them) stops the publish, as one that
// finds none does (TestLeaseLostStopsThePublish). Before, only a renewal
// of no row stopped it.
func TestPartlyRenewedLeaseStopsThePublish(t *testing.T) {
	const lease = 600 * time.Millisecond
	db := &renewingDialect{
		lockDialect: lockDialect{msgs: []outbox.Message{{ID: "a", Topic: "t", Key: "k", MaxAttempts: 5}, {ID: "b", Topic: "t", Key: "j", MaxAttempts: 5}}},
		renew:       func() (int64, error) { return 1, nil },
	}
	if took := runOneBatch(t, leaseMode{db}, lease); took >= lease {
		t.Errorf("the publish was stopped %v after the claim; want at the first renewal (%v)", took, lease/3)
	}
	if len(db.released) != 2 || len(db.retries) != 0 {
		t.Errorf("released %v, retried %v; want the rows released (the fenced release leaves the reclaimed one alone), no attempt spent", db.released, db.retries)
	}
}

// TestRenewedLeaseKeepsThePublish: renewals that succeed keep a publish
// going for longer than the lease.
func TestRenewedLeaseKeepsThePublish(t *testing.T) {
	const lease = 300 * time.Millisecond
	db := &renewingDialect{
		lockDialect: lockDialect{msgs: []outbox.Message{{ID: "a", Topic: "t", Key: "k", MaxAttempts: 5}}},
		renew:       func() (int64, error) { return 1, nil },
	}
	dest := &slowPublish{d: 4 * lease}
	e, err := New(leaseMode{db}, toDest{}, map[string]destination.Destination{"d": dest}, Options{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	if n, _, _, err := e.runBatch(context.Background(), e.log, false); err != nil || n != 1 {
		t.Fatalf("runBatch = %d, %v", n, err)
	}
	if dest.err != nil || len(db.released) != 0 || db.renewals < 3 {
		t.Errorf("publish error %v, released %v after %d renewals; want the publish to finish under renewed leases", dest.err, db.released, db.renewals)
	}
}

// slowPublish takes d to publish, unless its context ends first.
type slowPublish struct {
	d     time.Duration
	err   error
	calls int
}

func (s *slowPublish) Publish(ctx context.Context, _ []outbox.Message) error {
	s.calls++
	select {
	case <-ctx.Done():
		s.err = ctx.Err()
	case <-time.After(s.d):
	}
	return s.err
}
func (*slowPublish) Close() error { return nil }

// slowClaim claims its rows after a delay, as a claim that waited long for
// the claim turn does.
type slowClaim struct {
	*renewingDialect
	delay time.Duration
}

func (s slowClaim) Claim(ctx context.Context, p dialect.ClaimParams) ([]outbox.Message, error) {
	time.Sleep(s.delay)
	return s.renewingDialect.Claim(ctx, p)
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
			db := &renewingDialect{
				lockDialect: lockDialect{msgs: []outbox.Message{{ID: "a", Topic: "t", Key: "k", MaxAttempts: 5}}},
				renew:       tc.renew,
			}
			dest := &slowPublish{d: lease / 2}
			e, err := New(leaseMode{slowClaim{db, 2 * lease / 3}}, toDest{}, map[string]destination.Destination{"d": dest}, Options{Lease: lease})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, _, err := e.runBatch(context.Background(), e.log, false); err != nil {
				t.Fatal(err)
			}
			db.mu.Lock()
			renewals, released := db.renewals, len(db.released)
			db.mu.Unlock()
			if renewals < 1 {
				t.Errorf("no renewal after a claim that took 2/3 of the lease")
			}
			switch {
			case tc.published && (dest.calls != 1 || dest.err != nil || released != 0):
				t.Errorf("publish calls %d (err %v), released %d; want the row published whole, not cut", dest.calls, dest.err, released)
			case !tc.published && (dest.calls != 0 || released != 1 || len(db.retries) != 0):
				t.Errorf("publish calls %d, released %d, retried %v; want nothing published and the row released", dest.calls, released, db.retries)
			}
		})
	}
}

// TestClaimJustUnderHalfTheLeaseKeepsItsPublish: renewals are counted from
// the last confirmation, so a claim that took just under half the lease
// (no confirmation before the publish) renews soon after, with its full
// share of time, and a publish longer than the lease goes on. Before, the
// first renewal came a third of a lease after the publish began, with
// almost no time left before the deadline, and a healthy batch was cut
// (found by a review).
func TestClaimJustUnderHalfTheLeaseKeepsItsPublish(t *testing.T) {
	const lease = 1200 * time.Millisecond
	db := &renewingDialect{
		lockDialect: lockDialect{msgs: []outbox.Message{{ID: "a", Topic: "t", Key: "k", MaxAttempts: 5}}},
		renew:       func() (int64, error) { return 1, nil },
		delay:       40 * time.Millisecond,
	}
	dest := &slowPublish{d: lease}
	e, err := New(leaseMode{slowClaim{db, lease/2 - 10*time.Millisecond}}, toDest{}, map[string]destination.Destination{"d": dest}, Options{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := e.runBatch(context.Background(), e.log, false); err != nil {
		t.Fatal(err)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if dest.err != nil || len(db.released) != 0 || db.renewals < 2 {
		t.Errorf("publish error %v, released %v, %d renewals; want the publish to finish under renewed leases", dest.err, db.released, db.renewals)
	}
}

// deadlineDialect ends every batch at a fixed time after its claim, as
// lock mode's lock timeout does, whatever its renewals report.
type deadlineDialect struct {
	*renewingDialect
	after time.Duration
	mu    sync.Mutex
	end   time.Time
}

func (d *deadlineDialect) Claim(ctx context.Context, p dialect.ClaimParams) ([]outbox.Message, error) {
	d.mu.Lock()
	d.end = time.Now().Add(d.after)
	d.mu.Unlock()
	return d.renewingDialect.Claim(ctx, p)
}

func (d *deadlineDialect) BatchDeadline(string) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.end, true
}

// TestBatchDeadlineStopsThePublish: a batch with a fixed end (lock mode:
// the lock timeout rolls it back, and another relay may then claim its
// rows) stops its publish before that end, though every renewal succeeds.
// Before, lock mode's renewals always reported the batch held until the
// rollback, and the publish went on for up to a third of a lease past it.
func TestBatchDeadlineStopsThePublish(t *testing.T) {
	const lease, lockTimeout = 3 * time.Second, 1500 * time.Millisecond
	db := &deadlineDialect{renewingDialect: &renewingDialect{
		lockDialect: lockDialect{msgs: []outbox.Message{{ID: "a", Topic: "t", Key: "k", MaxAttempts: 5}}},
		renew:       func() (int64, error) { return 1, nil },
	}, after: lockTimeout}
	took := runOneBatch(t, struct {
		dialect.Dialect
		dialect.BatchDeadliner
	}{leaseMode{db}, db}, lease)
	if took >= lockTimeout || took < lockTimeout/2 {
		t.Errorf("the publish was stopped %v after the claim; want before the batch's end (%v), not before half of it", took, lockTimeout)
	}
}

// TestCutPublishKeepsDeferredRowsDelay: when a publish is cut (shutdown,
// or a lease that could not be kept), a row deferred because its
// destination was unavailable is retried with its deferral delay and no
// attempt spent, not released: released, it was due again at once, and the
// next claim took it to the destination that was down. Rows cut before an
// outcome are released.
func TestCutPublishKeepsDeferredRowsDelay(t *testing.T) {
	db := &renewingDialect{renew: func() (int64, error) { return 1, nil }}
	e, err := New(leaseMode{db}, toDest{}, map[string]destination.Destination{"d": acceptAll{}},
		Options{Lease: time.Second, Backoff: Backoff{Base: 300 * time.Millisecond, Max: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	deferred := &outbox.Message{ID: "deferred", Topic: "t", Attempt: 2, MaxAttempts: 5}
	cut := &outbox.Message{ID: "cut", Topic: "t", Attempt: 2, MaxAttempts: 5}
	report, _ := e.settle(e.log, "tok", []outcome{
		{msg: deferred, dest: "d", err: outbox.Unavailable(errors.New("connection refused")), deferred: true},
		{msg: cut, dest: "d", err: context.Canceled},
	}, true)
	report(true)
	db.mu.Lock()
	defer db.mu.Unlock()
	if len(db.retries) != 1 || db.retries[0].ID != "deferred" || db.retries[0].Attempt != 2 || db.retries[0].Delay <= 0 {
		t.Errorf("retries %+v; want the deferred row retried with a delay and its attempt unchanged", db.retries)
	}
	if len(db.released) != 1 || db.released[0] != "cut" {
		t.Errorf("released %v; want only the row cut before an outcome", db.released)
	}
}
