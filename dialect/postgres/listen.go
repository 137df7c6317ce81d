package postgres

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"regexp"
	"strings"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5"
)

// Wake on commit. A Listener holds one dedicated connection (outside the
// pool; a second one holds the notify lock, see arm.go) that LISTENs on a
// channel and turns every notification into a
// non-blocking signal on C: bursts of notifications collapse into one
// pending signal, so a busy producer never blocks or floods the relay. The
// relay's polling stays the safety net: a notification lost while the
// connection was down costs one poll interval, and after every reconnect
// the listener signals once, because rows may have been committed while
// nobody listened.
//
// Producers notify only while a relay sleeps: see arm.go.

//go:embed notify/trigger.sql
var notifyTriggerSQL string

// Listener backoff between reconnects.
const (
	listenMinBackoff = 100 * time.Millisecond
	listenMaxBackoff = 5 * time.Second
)

// WakeObserver is told the listener's state: the LISTEN connection up or
// down, this relay holding the notify lock or not, each notification. The
// metrics package implements it.
type WakeObserver interface {
	WakeListening(up bool)
	WakeArmed(armed bool)
	WakeNotified()
}

type nopWakeObserver struct{}

func (nopWakeObserver) WakeListening(bool) {}
func (nopWakeObserver) WakeArmed(bool)     {}
func (nopWakeObserver) WakeNotified()      {}

// Listener LISTENs on a PostgreSQL channel. Create it with
// Dialect.NewListener and run it with Run.
type Listener struct {
	cfg     *pgx.ConnConfig
	channel string
	c       chan struct{}
	log     *slog.Logger
	arm     *armer
	backoff time.Duration // first wait before a reconnect (listenMinBackoff)
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
	l := &Listener{cfg: cfg, channel: channel, c: make(chan struct{}, 1), log: log.With("channel", channel), backoff: listenMinBackoff}
	l.arm = &armer{cfg: armCfg, channel: channel, signal: l.signal, log: l.log, check: time.Second, obs: nopWakeObserver{}}
	return l, nil
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

// Observe sends the listener's state to o; call it before Run.
func (l *Listener) Observe(o WakeObserver) { l.arm.obs = o }

// Arm asks producers to notify from now on: see armer.arm.
func (l *Listener) Arm(ctx context.Context) (fresh, watched bool, err error) {
	return l.arm.arm(ctx)
}

// Run listens until ctx ends, reconnecting with backoff when the
// connection fails. It returns nil when ctx ends, having dropped the
// arming lock (and woken the relays it covered).
func (l *Listener) Run(ctx context.Context) error {
	l.arm.start(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); l.arm.watch(ctx) }()
	defer func() {
		<-watched
		l.arm.stop()
	}()
	wait := l.backoff
	for ctx.Err() == nil {
		start := time.Now()
		err := l.listen(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) > time.Minute {
			wait = l.backoff // it ran fine for a while: start over
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
	// Arm only while a notification can be heard; when the connection is
	// lost, drop the lock, or producers would notify into the void.
	l.arm.setListening(true)
	defer l.arm.setListening(false)
	l.signal() // rows committed while nobody listened
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return interpretError("listen", err)
		}
		// Disarmed before the workers wake: a worker that goes back to
		// sleep must find the relay unarmed and arm it again, or nobody
		// would be left to ask producers to notify.
		l.arm.obs.WakeNotified()
		l.arm.disarm(ctx)
	}
}

// NotifyTrigger is what NotifyTriggerState found of the wake-on-commit
// trigger that EnsureNotifyTrigger installs.
type NotifyTrigger struct {
	Name      string // <table>_qb_notify
	Installed bool   // the trigger is on the table
	Channel   string // the channel its function notifies ("" when not found)
	// Gated: it notifies only while a relay sleeps. The function of an
	// earlier release notified on every insert, which serialises the
	// producers' commits.
	Gated bool
}

var notifyChannelRE = regexp.MustCompile(`pg_notify\('((?:[^']|'')*)'`)

// NotifyTriggerState reports the trigger named as EnsureNotifyTrigger
// names it, for queuebox check. A trigger the application wrote itself
// under another name is not looked for.
func (d *Dialect) NotifyTriggerState(ctx context.Context) (NotifyTrigger, error) {
	t := NotifyTrigger{Name: d.mapping.TableName() + "_qb_notify"}
	var src string
	err := d.pool.QueryRow(ctx, `SELECT p.prosrc FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
WHERE t.tgrelid = $1::regclass AND t.tgname = $2 AND NOT t.tgisinternal`, d.mapping.Table(QuoteIdent), t.Name).Scan(&src)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, nil
	}
	if err != nil {
		return t, interpretError("notify_trigger_state", err)
	}
	t.Installed = true
	if m := notifyChannelRE.FindStringSubmatch(src); m != nil {
		t.Channel = strings.ReplaceAll(m[1], "''", "'")
	}
	t.Gated = strings.Contains(src, "pg_try_advisory_xact_lock_shared(")
	return t, nil
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
