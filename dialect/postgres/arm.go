package postgres

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/sqlname"
)

// Producers notify only while a relay sleeps. A transaction that has
// called NOTIFY takes a cluster-wide lock at COMMIT and keeps it until its
// commit record is flushed, so notifying producers commit one at a time;
// a relay that is awake needs no notification. The gate is an advisory
// lock, (NotifyLockClass, hashtext(channel)):
//
//   - producers (notify/trigger.sql, the producer package's WithNotify)
//     try it shared, and notify only when that fails: a relay holds it, or
//     waits for it;
//   - a relay asks for it exclusively, on a dedicated connection, when its
//     last busy worker falls idle (Arm), and drops it at the first
//     notification (disarm);
//   - a producer that did not notify holds it shared until its transaction
//     ends, so a relay that asks for the lock gets it only after that
//     commit, and its workers claim once more before they sleep: the row
//     is seen. While the relay's request waits in the queue, producers'
//     shared requests are refused, and they notify.
//
// The lock lives and dies with its connection: a relay that crashes leaves
// nothing behind. Relays it covered find out within armer.check (watch).

// armIOTimeout bounds every round trip of the gate made under armer.mu
// (connect, ask, drop): a half-open connection must not stall the workers
// that wait to arm.
const armIOTimeout = 2 * time.Second

// NotifyLockClass is the first key of the advisory lock that gates NOTIFY
// (the second is hashtext(channel)), shared with the producers.
const NotifyLockClass = sqlname.NotifyLockClass

// The arming statements. armSQL answers "armed" when this session took the
// lock, "covered" when another relay holds it or waits for it (producers
// notify then, and every listener hears them), and "wait" when producers'
// open transactions hold it shared.
const (
	armSQL = `SELECT CASE
    WHEN pg_try_advisory_lock($1, hashtext($2)) THEN 'armed'
    WHEN EXISTS (
        SELECT 1 FROM pg_locks
        WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND classid = $1::oid AND objid = hashtext($2)::oid AND objsubid = 2
          AND mode = 'ExclusiveLock' AND pid <> pg_backend_pid()
    ) THEN 'covered'
    ELSE 'wait' END`
	armWaitSQL = "SELECT pg_advisory_lock($1, hashtext($2))"
	disarmSQL  = "SELECT pg_advisory_unlock($1, hashtext($2))"
	// handOverSQL drops the lock and wakes the relays this one covered, so
	// that one of them arms in its place.
	handOverSQL = "SELECT pg_advisory_unlock($1, hashtext($2)), pg_notify($2, '')"
)

// armer holds a Listener's side of the gate.
type armer struct {
	cfg     *pgx.ConnConfig
	channel string
	signal  func() // wakes the relay's workers
	log     *slog.Logger
	obs     WakeObserver
	check   time.Duration // how often watch looks at the lock (1s)

	mu      sync.Mutex
	runCtx  context.Context // Run's: ends a request waiting for the lock
	conn    *pgx.Conn       // the arming connection
	armed   bool            // conn holds the lock
	pending bool            // conn waits for the lock (await owns it meanwhile)
	// coveredAt is when another relay was last seen holding or waiting for
	// the lock; zero when not covered.
	coveredAt time.Time
	listening bool // the LISTEN connection is up: a notification can be heard
	stopped   bool
	waits     sync.WaitGroup
}

// start records Run's context; it comes before anything can arm.
func (a *armer) start(ctx context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.runCtx = ctx
}

// arm asks producers to notify from now on. It reports fresh when this
// call armed the channel, or queued the request behind producers' open
// transactions: every producer that committed without notifying before
// now has finished, so one more claim sees its rows, and the caller claims
// once more before it sleeps (the rows of the open producers come with the
// grant, which wakes the workers; producers that commit while the request
// waits notify). It reports watched while this relay holds the lock or
// waits for it: every way that ends (a grant, a lost connection, a
// hand-over) signals the workers, so the caller can sleep until a
// notification, polling only as a safety net. It reports neither when
// another relay covers this one (that relay drops the lock at its first
// wake and may stay busy without arming again, which this relay learns
// only at its next look: it polls meanwhile), when the LISTEN connection
// is down or the listener has stopped (polling finds the rows then), nor
// on an error.
func (a *armer) arm(ctx context.Context) (fresh, watched bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.stopped, !a.listening:
		return false, false, nil
	case a.armed, a.pending:
		return false, true, nil
	case !a.coveredAt.IsZero() && time.Since(a.coveredAt) < a.check:
		return false, false, nil
	}
	fresh, err = a.askLocked(ctx)
	return fresh, a.armed || a.pending, err
}

func (a *armer) askLocked(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, armIOTimeout)
	defer cancel()
	reused := a.conn != nil
	state, err := a.queryLocked(ctx)
	if err != nil && reused && a.conn.IsClosed() {
		// The connection is kept between armings, and one that died while
		// it held nothing (a database restart, a cut network) is noticed
		// by nobody until it is used here. Once on a new one: failing,
		// the worker would poll until its next idle spell, as much as
		// MaxPollInterval with the wake relied on.
		a.closeLocked()
		state, err = a.queryLocked(ctx)
	}
	if err != nil {
		a.closeLocked()
		return false, interpretError("notify_arm", err)
	}
	a.coveredAt = time.Time{}
	switch state {
	case "armed":
		a.setArmedLocked(true)
		return true, nil
	case "covered":
		a.coveredAt = time.Now()
		return false, nil
	}
	// Producers that did not notify are still open. Queue behind them;
	// the queued request already makes new producers notify. Those that
	// committed before it are visible now: fresh.
	a.pending = true
	a.waits.Add(1)
	go a.await(a.conn)
	return true, nil
}

// queryLocked runs armSQL on the arming connection, connecting first when
// there is none.
func (a *armer) queryLocked(ctx context.Context) (string, error) {
	if a.conn == nil {
		cfg := a.cfg.Copy()
		// The request may wait as long as a producer's transaction lasts.
		cfg.RuntimeParams["lock_timeout"] = "0"
		cfg.RuntimeParams["statement_timeout"] = "0"
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return "", err
		}
		a.conn = conn
	}
	var state string
	err := a.conn.QueryRow(ctx, armSQL, NotifyLockClass, a.channel).Scan(&state)
	return state, err
}

// await waits for the lock on conn, which it owns until it returns, and
// wakes the workers when it is granted: a fresh arming.
func (a *armer) await(conn *pgx.Conn) {
	defer a.waits.Done()
	_, err := conn.Exec(a.runCtx, armWaitSQL, NotifyLockClass, a.channel)
	if err != nil {
		// A cancelled wait leaves the server waiting for the lock unless
		// told (pgx only gives up on the socket), and other relays would
		// take that request for a cover.
		ctx, cancel := context.WithTimeout(context.Background(), armIOTimeout)
		_ = conn.PgConn().CancelRequest(ctx)
		cancel()
	}
	a.mu.Lock()
	a.pending = false
	fresh := false
	switch {
	case err != nil:
		if a.runCtx.Err() == nil {
			a.log.Warn("waiting for the notify lock failed; polling until a worker arms again", "err", err)
		}
		a.closeLocked()
	case !a.listening || a.stopped:
		a.handOverLocked()
	default:
		a.setArmedLocked(true)
		fresh = true
	}
	a.mu.Unlock()
	if fresh || err != nil {
		a.signal()
	}
}

// disarm runs for every notification: producers stop notifying until the
// relay's last busy worker falls idle again. The lock is marked dropped
// before the workers wake, so that a worker going back to sleep arms
// again (re-entrantly, on the session that still holds it) instead of
// trusting a hold about to go.
func (a *armer) disarm(ctx context.Context) {
	a.mu.Lock()
	held, conn := a.armed, a.conn
	a.setArmedLocked(false)
	a.coveredAt = time.Time{}
	a.mu.Unlock()
	a.signal()
	if !held {
		return
	}
	a.mu.Lock()
	lost := false
	if a.conn == conn && !a.pending {
		ctx, cancel := context.WithTimeout(ctx, armIOTimeout)
		if _, err := conn.Exec(ctx, disarmSQL, NotifyLockClass, a.channel); err != nil {
			a.log.Debug("dropping the notify lock failed; closing its connection", "err", err)
			// The lock goes with the session, and with it a worker's
			// re-arming since phase one: wake the workers to arm again.
			a.closeLocked()
			lost = true
		}
		cancel()
	}
	a.mu.Unlock()
	if lost {
		a.signal()
	}
}

// setListening follows the LISTEN connection: while it is down nothing
// arms, and a held lock is handed over, or producers would notify into
// the void.
func (a *armer) setListening(on bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.listening, a.coveredAt = on, time.Time{}
	a.obs.WakeListening(on)
	if on {
		return
	}
	if a.armed {
		a.handOverLocked()
	}
	// Workers that sleep until a notification (Arm reported watched) go
	// back to polling: none can be heard now.
	a.signal()
}

// watch looks at the lock every a.check until ctx ends: a lost arming
// connection, or a cover that went away (the covering relay crashed),
// wakes the workers, which arm again.
func (a *armer) watch(ctx context.Context) {
	t := time.NewTicker(a.check)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if a.look(ctx) {
			a.signal()
		}
	}
}

func (a *armer) look(ctx context.Context) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.stopped || a.pending || !a.listening:
		return false
	case a.armed:
		// A 1 ms read, no query: Ping would be a round trip on a connection
		// that must stay idle holding the lock, at every look.
		if err := a.conn.PgConn().CheckConn(); err != nil { //nolint:staticcheck // SA1019: a read that costs the server nothing is what this look needs; a dead connection that still takes writes is found by the next LISTEN notification or ask
			a.log.Warn("the connection holding the notify lock was lost; arming again", "err", err)
			a.closeLocked()
			return true
		}
		return false
	case !a.coveredAt.IsZero():
		fresh, err := a.askLocked(ctx)
		return fresh || err != nil
	}
	return false
}

// stop ends the gate when Run returns (runCtx is done): a waiting request
// ends, and a held lock is handed over to the relays this one covered.
func (a *armer) stop() {
	a.mu.Lock()
	a.stopped = true
	a.mu.Unlock()
	a.waits.Wait()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.armed {
		a.handOverLocked()
	}
	a.closeLocked()
}

// handOverLocked releases the lock and wakes the relays it covered,
// closing the connection if that fails (the lock goes with it; they then
// find out within a.check).
func (a *armer) handOverLocked() {
	a.setArmedLocked(false)
	if a.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), armIOTimeout)
	defer cancel()
	if _, err := a.conn.Exec(ctx, handOverSQL, NotifyLockClass, a.channel); err != nil {
		a.closeLocked()
	}
}

func (a *armer) closeLocked() {
	a.setArmedLocked(false)
	a.coveredAt = time.Time{}
	if a.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = a.conn.Close(ctx)
	a.conn = nil
}

func (a *armer) setArmedLocked(armed bool) {
	if a.armed != armed {
		a.armed = armed
		a.obs.WakeArmed(armed)
	}
}
