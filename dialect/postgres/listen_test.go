package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/internal/testenv"
)

// notifyRig is one outbox table with the wake-on-commit trigger and
// listeners on a channel of its own.
type notifyRig struct {
	t       *testing.T
	ctx     context.Context
	d       *Dialect
	channel string
}

func newNotifyRig(t *testing.T) *notifyRig {
	pg := testenv.Postgres(t)
	r := &notifyRig{
		t: t, ctx: testenv.Context(t, 60*time.Second), d: newDialect(t, pg.Pool),
		channel: "qb_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12],
	}
	if err := r.d.EnsureNotifyTrigger(r.ctx, r.channel); err != nil {
		t.Fatal(err)
	}
	return r
}

// listen starts a listener and waits until it listens (its first signal).
func (r *notifyRig) listen() *Listener {
	r.t.Helper()
	l, err := r.d.NewListener(r.channel, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(ctx) }()
	r.t.Cleanup(func() { cancel(); <-done })
	r.signalled(l, "listening")
	return l
}

func (r *notifyRig) signalled(l *Listener, what string) {
	r.t.Helper()
	select {
	case <-l.C():
	case <-time.After(10 * time.Second):
		r.t.Fatalf("%s: no signal", what)
	}
}

func (r *notifyRig) quiet(l *Listener, what string) {
	r.t.Helper()
	select {
	case <-l.C():
		r.t.Errorf("%s: signalled", what)
	case <-time.After(300 * time.Millisecond):
	}
}

// begin opens a producer transaction that has inserted one row: the
// trigger has run, and holds what it takes until the end.
func (r *notifyRig) begin() pgx.Tx {
	r.t.Helper()
	tx, err := r.d.pool.Begin(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(r.ctx, `INSERT INTO outbox (topic, payload) VALUES ('t', '{}')`); err != nil {
		r.t.Fatal(err)
	}
	return tx
}

func (r *notifyRig) insert() {
	r.t.Helper()
	if err := r.begin().Commit(r.ctx); err != nil {
		r.t.Fatal(err)
	}
}

// lock reports the relays' hold on the channel's notify lock: granted and
// waiting exclusive requests.
func (r *notifyRig) lock() (held, waiting int) {
	r.t.Helper()
	err := r.d.pool.QueryRow(r.ctx, `SELECT count(*) FILTER (WHERE granted), count(*) FILTER (WHERE NOT granted)
FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::oid AND objid = hashtext($2)::oid AND objsubid = 2 AND mode = 'ExclusiveLock'`,
		NotifyLockClass, r.channel).Scan(&held, &waiting)
	if err != nil {
		r.t.Fatal(err)
	}
	return held, waiting
}

func (r *notifyRig) arm(l *Listener) bool {
	r.t.Helper()
	fresh, err := l.Arm(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	return fresh
}

// waitUnlocked waits until no relay holds the lock (a listener drops it
// after the signal, on its own goroutine).
func (r *notifyRig) waitUnlocked() {
	r.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if held, _ := r.lock(); held == 0 {
			return
		}
	}
	r.t.Fatal("the notify lock is still held after the wake")
}

// TestProducersNotifyOnlyWhileARelaySleeps: NOTIFY serialises commits, so
// the trigger notifies only while a relay has armed the channel, and the
// first notification disarms it.
func TestProducersNotifyOnlyWhileARelaySleeps(t *testing.T) {
	r := newNotifyRig(t)
	l := r.listen()

	r.insert()
	r.quiet(l, "insert with no relay asleep")

	if !r.arm(l) {
		t.Fatal("Arm on an idle channel did not arm")
	}
	if r.arm(l) {
		t.Error("a second Arm reported a fresh arming")
	}
	if held, _ := r.lock(); held != 1 {
		t.Fatalf("armed, but %d exclusive holders", held)
	}
	r.insert()
	r.signalled(l, "insert while armed")
	r.waitUnlocked()
	r.insert()
	r.quiet(l, "insert after the wake disarmed")

	// Arming again after the wake is a fresh arming.
	if !r.arm(l) {
		t.Error("Arm after the wake did not arm")
	}
}

// TestArmWaitsForProducersThatDidNotNotify is the race the lock closes: a
// producer that found every relay awake, and so did not notify, has not
// committed yet when a relay goes to sleep. Arm must not return before
// that commit (else the relay's last claim misses the row and it sleeps
// until the poll), and producers that commit meanwhile must notify.
func TestArmWaitsForProducersThatDidNotNotify(t *testing.T) {
	r := newNotifyRig(t)
	l := r.listen()
	l.armWait = 30 * time.Second

	open := r.begin() // did not notify: no relay was asleep
	armed := make(chan bool, 1)
	go func() {
		fresh, err := l.Arm(r.ctx)
		if err != nil {
			t.Error(err)
		}
		armed <- fresh
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, waiting := r.lock(); waiting == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Arm never queued for the lock")
		}
	}
	select {
	case <-armed:
		t.Fatal("Arm returned while a producer that did not notify was open")
	default:
	}

	// A producer that commits while the relay waits to sleep notifies.
	r.insert()
	r.signalled(l, "insert while the relay waits to arm")

	if err := open.Commit(r.ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case fresh := <-armed:
		if !fresh {
			t.Error("Arm did not arm once the producer committed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Arm still waiting after the producer committed")
	}
}

// TestArmGivesUpOnALongTransaction: a producer transaction that stays
// open leaves the relay polling (Arm reports false, no error) instead of
// blocking it.
func TestArmGivesUpOnALongTransaction(t *testing.T) {
	r := newNotifyRig(t)
	l := r.listen()
	l.armWait = 50 * time.Millisecond
	open := r.begin()
	if r.arm(l) {
		t.Error("armed while a producer that did not notify was open")
	}
	if held, waiting := r.lock(); held != 0 || waiting != 0 {
		t.Errorf("after giving up: %d held, %d waiting", held, waiting)
	}
	if err := open.Rollback(r.ctx); err != nil {
		t.Fatal(err)
	}
	if !r.arm(l) {
		t.Error("Arm did not arm once the transaction ended")
	}
}

// TestSecondRelayIsCoveredByTheFirst: one relay holds the lock; another
// that goes to sleep is covered (producers notify, and every listener
// hears it) and must not wait for the lock.
func TestSecondRelayIsCoveredByTheFirst(t *testing.T) {
	r := newNotifyRig(t)
	a, b := r.listen(), r.listen()
	if !r.arm(a) {
		t.Fatal("first relay did not arm")
	}
	if r.arm(b) {
		t.Error("second relay armed beside the first")
	}
	if _, waiting := r.lock(); waiting != 0 {
		t.Errorf("the covered relay waits for the lock (%d waiting)", waiting)
	}
	r.insert()
	r.signalled(a, "armed relay")
	r.signalled(b, "covered relay")
}

// TestArmSurvivesALostConnection: the lock goes with its connection; a
// relay whose arming connection died arms again instead of sleeping on a
// lock nobody holds.
func TestArmSurvivesALostConnection(t *testing.T) {
	r := newNotifyRig(t)
	l := r.listen()
	l.armCheck = 0
	if !r.arm(l) {
		t.Fatal("did not arm")
	}
	pid := l.armConn.PgConn().PID()
	if _, err := r.d.pool.Exec(r.ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	r.waitUnlocked()
	r.insert()
	r.quiet(l, "insert after the arming connection died") // the lock is gone: nobody notifies
	if !r.arm(l) {
		t.Fatal("Arm did not see the lost connection")
	}
	r.insert()
	r.signalled(l, "insert after arming again")
}

// TestArmAfterRunReturns: a worker that sleeps while the relay shuts down
// must not open an arming connection nobody closes.
func TestArmAfterRunReturns(t *testing.T) {
	r := newNotifyRig(t)
	l, err := r.d.NewListener(r.channel, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(ctx) }()
	r.signalled(l, "listening")
	if !r.arm(l) {
		t.Fatal("did not arm")
	}
	cancel()
	<-done
	r.waitUnlocked()
	if r.arm(l) || l.armConn != nil {
		t.Error("Arm after Run returned opened a connection")
	}
}
