package postgres

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"sync"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Wake on commit. A Listener holds one dedicated connection (outside the
// pool) that LISTENs on a channel and turns every notification into a
// non-blocking signal on C: bursts of notifications collapse into one
// pending signal, so a busy producer never blocks or floods the relay. The
// relay's polling stays the safety net: a notification lost while the
// connection was down costs one poll interval, and after every reconnect
// the listener signals once, because rows may have been committed while
// nobody listened.
//
// Producers notify only while a relay sleeps (notify/trigger.sql says
// why): before a worker sleeps, the relay calls Arm, which takes the
// channel's advisory lock exclusively on a second dedicated connection;
// the first notification drops it again, so a busy relay never makes
// producers notify. The lock lives and dies with that connection: a relay
// that crashes leaves nothing behind.

//go:embed notify/trigger.sql
var notifyTriggerSQL string

// Listener backoff between reconnects.
const (
	listenMinBackoff = 100 * time.Millisecond
	listenMaxBackoff = 5 * time.Second
)

// NotifyLockClass is the first key of the advisory lock that gates NOTIFY
// (the second is hashtext(channel)): "qb". Producers take it shared, a
// sleeping relay exclusively.
const NotifyLockClass = 0x7162

// armWait bounds how long Arm waits for producers whose transactions hold
// the shared lock. They commit within milliseconds; one that holds it
// longer (a long transaction) leaves the relay polling until it ends.
const armWait = 10 * time.Millisecond

// Listener LISTENs on a PostgreSQL channel. Create it with
// Dialect.NewListener and run it with Run.
type Listener struct {
	cfg     *pgx.ConnConfig
	channel string
	c       chan struct{}
	log     *slog.Logger

	armMu   sync.Mutex
	armCfg  *pgx.ConnConfig
	armConn *pgx.Conn // holds the exclusive lock while armed
	armed   bool
	stopped bool // Run has returned: Arm opens no connection any more
	armWait time.Duration
	// checkedAt is when the armed connection was last seen alive; it is
	// looked at again after armCheck, without a round trip.
	checkedAt time.Time
	armCheck  time.Duration
	// coveredAt is when another relay was last seen holding the lock; the
	// question is asked again after armCheck.
	coveredAt time.Time
}

// NewListener returns a Listener on channel that connects with the same
// settings as the dialect's pool.
func (d *Dialect) NewListener(channel string, log *slog.Logger) (*Listener, error) {
	if err := validChannel(channel); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := d.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = "queuebox-listen"
	armCfg := d.pool.Config().ConnConfig.Copy()
	armCfg.RuntimeParams["application_name"] = "queuebox-arm"
	return &Listener{
		cfg: cfg, channel: channel, c: make(chan struct{}, 1), log: log.With("channel", channel),
		armCfg: armCfg, armWait: armWait, armCheck: time.Second,
	}, nil
}

func validChannel(channel string) error {
	switch {
	case channel == "":
		return errors.New("postgres: notify channel is empty")
	case len(channel) > maxIdentLen:
		return fmt.Errorf("postgres: notify channel %q is longer than %d bytes", channel, maxIdentLen)
	}
	return nil
}

// C delivers a signal whenever rows may have been committed. It has a
// buffer of one: signals that arrive while one is pending are merged.
func (l *Listener) C() <-chan struct{} { return l.c }

func (l *Listener) signal() {
	select {
	case l.c <- struct{}{}:
	default:
	}
}

// Run listens until ctx ends, reconnecting with backoff when the
// connection fails. It returns nil when ctx ends, having dropped the
// arming lock.
func (l *Listener) Run(ctx context.Context) error {
	defer func() {
		l.armMu.Lock()
		defer l.armMu.Unlock()
		l.stopped = true
		l.closeArmLocked()
	}()
	wait := listenMinBackoff
	for ctx.Err() == nil {
		start := time.Now()
		err := l.listen(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) > time.Minute {
			wait = listenMinBackoff // it ran fine for a while: start over
		}
		l.log.Warn("LISTEN connection failed; reconnecting (polling continues meanwhile)", "err", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(wait*2, listenMaxBackoff)
	}
	return nil
}

// listen runs one connection until it fails or ctx ends.
func (l *Listener) listen(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	if err != nil {
		return interpretError("listen", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+QuoteIdent(l.channel)); err != nil {
		return interpretError("listen", err)
	}
	l.log.Debug("listening for commits")
	l.signal() // rows committed while nobody listened
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return interpretError("listen", err)
		}
		l.signal()
		l.disarm(ctx)
	}
}

// The arming statements. armSQL answers "armed" when this relay took the
// lock, "covered" when another relay holds it (producers notify; this
// relay hears them too), and "wait" when producers' open transactions hold
// it shared.
const (
	armSQL = `SELECT CASE
    WHEN pg_try_advisory_lock($1, hashtext($2)) THEN 'armed'
    WHEN EXISTS (
        SELECT 1 FROM pg_locks
        WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND classid = $1::oid AND objid = hashtext($2)::oid AND objsubid = 2
          AND mode = 'ExclusiveLock' AND granted
    ) THEN 'covered'
    ELSE 'wait' END`
	armWaitSQL = "SELECT pg_advisory_lock($1, hashtext($2))"
	disarmSQL  = "SELECT pg_advisory_unlock($1, hashtext($2))"
)

// Arm asks producers to notify from now on; the relay calls it before a
// worker sleeps after an empty claim. It reports true when this call armed
// the channel: producers that committed without notifying have all
// finished (a producer's open transaction holds the shared lock, and Arm
// waits for it, up to armWait), so one more claim sees their rows, and
// the worker must claim once more before it sleeps. It reports false when
// the channel was armed already (by this relay or another), and when it
// could not arm (an open producer transaction, the database unreachable):
// then polling finds the rows, as it does without wake on commit.
func (l *Listener) Arm(ctx context.Context) (bool, error) {
	l.armMu.Lock()
	defer l.armMu.Unlock()
	if l.stopped {
		return false, nil
	}
	if l.armed {
		if time.Since(l.checkedAt) < l.armCheck {
			return false, nil
		}
		// A connection that died took the lock with it, and producers
		// stopped notifying: see it (a 1 ms read, no query) and arm again.
		if err := l.armConn.PgConn().CheckConn(); err == nil {
			l.checkedAt = time.Now()
			return false, nil
		}
		l.log.Warn("the connection holding the notify lock was lost; arming again")
		l.closeArmLocked()
	}
	if time.Since(l.coveredAt) < l.armCheck {
		return false, nil
	}
	if l.armConn == nil {
		cfg := l.armCfg.Copy()
		cfg.RuntimeParams["lock_timeout"] = strconv.FormatInt(l.armWait.Milliseconds(), 10)
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return false, interpretError("notify_arm", err)
		}
		l.armConn = conn
	}
	var state string
	if err := l.armConn.QueryRow(ctx, armSQL, NotifyLockClass, l.channel).Scan(&state); err != nil {
		l.closeArmLocked()
		return false, interpretError("notify_arm", err)
	}
	switch state {
	case "armed":
		l.armed, l.checkedAt = true, time.Now()
		return true, nil
	case "covered":
		l.coveredAt = time.Now()
		return false, nil
	}
	// Producers are committing: wait for them. Meanwhile the waiting
	// request makes new producers notify (a shared request behind a queued
	// exclusive one is refused), so nothing committed during the wait is
	// missed either.
	if _, err := l.armConn.Exec(ctx, armWaitSQL, NotifyLockClass, l.channel); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available: a long producer transaction
			return false, nil
		}
		l.closeArmLocked()
		return false, interpretError("notify_arm", err)
	}
	l.armed, l.checkedAt = true, time.Now()
	return true, nil
}

// disarm drops the lock after a notification woke the relay: producers
// stop notifying until a worker sleeps again. A relay that another one
// covered asks again next time: the other one is awake now too.
func (l *Listener) disarm(ctx context.Context) {
	l.armMu.Lock()
	defer l.armMu.Unlock()
	l.coveredAt = time.Time{}
	if !l.armed {
		return
	}
	l.armed = false
	if _, err := l.armConn.Exec(ctx, disarmSQL, NotifyLockClass, l.channel); err != nil {
		l.log.Debug("dropping the notify lock failed; closing its connection", "err", err)
		l.closeArmLocked() // the lock goes with the session
	}
}

func (l *Listener) closeArmLocked() {
	l.armed, l.coveredAt = false, time.Time{}
	if l.armConn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = l.armConn.Close(ctx)
	l.armConn = nil
}

// EnsureNotifyTrigger installs, when missing, the statement-level AFTER
// INSERT trigger that sends NOTIFY channel for every inserting statement
// on the outbox table (see notify/trigger.sql). It is idempotent and safe
// to run from several relays at once. The function is named after the
// table (<table>_qb_notify) and created in the table's schema; a changed
// channel replaces the function.
func (d *Dialect) EnsureNotifyTrigger(ctx context.Context, channel string) error {
	if err := validChannel(channel); err != nil {
		return err
	}
	name := d.mapping.TableName() + "_qb_notify"
	if len(name) > maxIdentLen {
		return fmt.Errorf("postgres: notify trigger name %q is longer than %d bytes (shorten the table name or create the trigger yourself)", name, maxIdentLen)
	}
	fn := QuoteIdent(name)
	if s := d.mapping.Schema(); s != "" {
		fn = QuoteIdent(s) + "." + fn
	}
	tmpl, err := template.New("notify").Option("missingkey=error").Parse(notifyTriggerSQL)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, struct {
		Function, Channel string
		LockClass         int
	}{fn, quoteLiteral(channel), NotifyLockClass}); err != nil {
		return err
	}
	table := d.mapping.Table(QuoteIdent)
	h := fnv.New64a()
	h.Write([]byte("queuebox-notify-trigger:" + table))
	lockKey := int64(h.Sum64())

	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return interpretError("notify_trigger", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey); err != nil {
		return interpretError("notify_trigger", err)
	}
	if _, err := tx.Exec(ctx, b.String()); err != nil {
		return interpretError("notify_trigger", err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname = $2)", table, name).Scan(&exists); err != nil {
		return interpretError("notify_trigger", err)
	}
	if !exists {
		ddl := "CREATE TRIGGER " + QuoteIdent(name) + " AFTER INSERT ON " + table + " FOR EACH STATEMENT EXECUTE FUNCTION " + fn + "()"
		if _, err := tx.Exec(ctx, ddl); err != nil {
			return interpretError("notify_trigger", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return interpretError("notify_trigger", err)
	}
	return nil
}
