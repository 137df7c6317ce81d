package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/sqlname"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// ownFiles are the queries only this dialect has, outside the set every
// dialect shares (QueryNames): the table's claim turn (sql/turn) and what
// `queuebox check` reads (sql/check).
//
//go:embed sql/turn/*.sql sql/check/*.sql
var ownFiles embed.FS

// maxIdentLen is PostgreSQL's NAMEDATALEN-1: longer names are silently
// truncated by the server, so they are refused here.
const maxIdentLen = 63

var (
	_ dialect.Dialect = (*Dialect)(nil)
	_ dialect.Sweeper = (*Dialect)(nil)
)

// Dialect is the PostgreSQL dialect: the delivery-path SQL rendered for one
// mapping, run on a pgx pool.
type Dialect struct {
	pool    *pgxpool.Pool
	mapping dialect.Mapping
	opts    options
	queries map[string]string
	// claims renders claim.sql per (limit, window); nil in lock mode.
	claims *claimShapes
	// turnSQL takes the table's claim turn (WithTableClaimTurns); empty
	// when claims do not take turns across relays.
	turnSQL    string
	tryTurnSQL string // the same, without waiting (dialect.ClaimParams.Poll)
	// queueSQL takes the turn like turnSQL and answers whether it had to
	// queue for it (another claim held it when asked): turnClaim's, under
	// the prepared statement queueName (preparedName).
	queueSQL, queueName string
	turnQueued          func(bool) // OnClaimTurn; nil: not reported
	// turnWaited receives how long each claim waited for the turn
	// (ObserveTurnWait); nil: not measured.
	turnWaited func(time.Duration)
}

// Option changes how New renders the SQL.
type Option func(*options)

type options struct {
	hold   bool
	idType string // SQL type of the id column for casts (WithIDType); "" = uuid
	lock   bool   // lock mode (NewLockMode): the lease-only queries are not rendered
	// buckets: bucket mode (NewBucketMode): the lease-only queries are not
	// rendered, and the claim window leaves out rows in flight here and
	// rows of buckets owned elsewhere.
	buckets bool
	// replicaTurns: claims take turns within one relay only
	// (WithTableClaimTurns(false)); the zero value is the default, turns
	// across every relay on the table.
	replicaTurns bool
	uniqueID     bool // WithUniqueID
	lastErrorLen int  // WithLastErrorLength; 0: unbounded
}

// WithUniqueID tells the dialect that the id column has a unique index (a
// primary key, as on the bundled table; ResolveTable's TablePlan.IDUnique).
// The claim's UPDATE then does not repeat the head-of-key probe of its
// locking scan: with a unique id the repetition can only agree with the
// scan, and it is about a sixth of the claim's time, on the path that the
// claims of every relay take turns on.
// Without it (the default, and on an adopted table whose id no unique index
// covers) the UPDATE's join on id can reach rows the scan never tested, and
// the repeated probe keeps a second row of a key out of the batch.
func WithUniqueID(unique bool) Option { return func(o *options) { o.uniqueID = unique } }

// WithLastErrorLength tells the dialect that the lastError column holds at
// most n characters (a VARCHAR(n); ResolveTable's TablePlan.LastErrorLen).
// The retry and dead statements then cut their error texts to n characters:
// a longer one made PostgreSQL refuse the statement (22001), so the row
// was never settled, and it went round again at every lease expiry without
// spending an attempt. 0 (the default): the column takes any length.
func WithLastErrorLength(n int) Option { return func(o *options) { o.lastErrorLen = max(n, 0) } }

// WithTableClaimTurns sets whether the claims of every relay on the table
// take turns (true, the default; relay.claimTurns: table) or only the claims
// of one relay (false; relay.claimTurns: replica). In lease mode each claim
// then first takes a transaction-scoped advisory lock of the table
// (sql/turn/queue.sql), in the same implicit transaction and network round trip as
// the claim statement, so the lock is held exactly as long as the claim.
// Claims that run at once race for the same rows at the front of the claim
// index: each skips what the others have locked, walks on, and (keyed) finds
// the heads taken and scans its window for nothing, or for a fragment of a
// batch. Taking turns, each claim starts from the committed result of the
// last one (docs/design.md, "The claim turn across replicas"). Lock mode holds its
// claim's transaction open while it publishes, so it never takes this lock.
func WithTableClaimTurns(on bool) Option { return func(o *options) { o.replicaTurns = !on } }

// WithHoldDeadKeys renders the SQL for relay.onDead: hold when hold is true:
// a keyed row that dies holds its key (its held_at is set), and the claim
// keeps the key's later rows waiting until the dead row is replayed or its
// key released (Dialect.ReleaseKey). The table needs the heldAt column
// (held_at in the bundled table, migration 00002). Without it (the default,
// relay.onDead: release) no query reads or writes that column.
func WithHoldDeadKeys(hold bool) Option { return func(o *options) { o.hold = hold } }

// New renders the SQL for m and returns a Dialect that runs it on pool.
func New(pool *pgxpool.Pool, m dialect.Mapping, opts ...Option) (*Dialect, error) {
	if pool == nil {
		return nil, errors.New("postgres: nil pool")
	}
	o := newOptions(opts)
	queries, err := Render(m, opts...)
	if err != nil {
		return nil, err
	}
	d := &Dialect{pool: pool, mapping: m, opts: o, queries: queries}
	if !o.lock && !o.buckets {
		if d.claims, err = newClaimShapes(sqlFiles, "sql/claim.sql", "$3", m, o); err != nil {
			return nil, err
		}
		if !o.replicaTurns {
			turn, err := renderFiles(ownFiles, "sql/turn", []string{"take", "try", "queue"}, m, o)
			if err != nil {
				return nil, err
			}
			d.turnSQL, d.tryTurnSQL, d.queueSQL = turn["take"], turn["try"], turn["queue"]
			d.queueName = preparedName(d.queueSQL)
		}
	}
	return d, nil
}

// HoldsDeadKeys reports whether the dialect was built WithHoldDeadKeys(true).
func (d *Dialect) HoldsDeadKeys() bool { return d.opts.hold }

// ObserveTurnWait has f receive, for each claim that takes the table's claim
// turn, the time from sending the claim to the grant of the turn: the wait
// behind the claims of other workers and relays, plus a round trip. Call it
// before the dialect is used. Where it is a large part of the claim's time
// with several relays, the turn is what they queue on (docs/operations.md).
func (d *Dialect) ObserveTurnWait(f func(time.Duration)) { d.turnWaited = f }

// OnClaimTurn implements dialect.ClaimTurnReporter: f receives, for each
// claim that takes the table's claim turn, whether it had to queue for it.
func (d *Dialect) OnClaimTurn(f func(queued bool)) { d.turnQueued = f }

// UniqueID reports whether the dialect was built WithUniqueID(true): its
// claim does not repeat the head-of-key probe in the UPDATE.
func (d *Dialect) UniqueID() bool { return d.opts.uniqueID }

// QueryNames returns the names of the embedded queries, sorted. It equals
// dialect.QueryNames().
func QueryNames() []string {
	entries, err := fs.ReadDir(sqlFiles, "sql")
	if err != nil {
		panic(err) // embedded at build time
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".sql"))
	}
	sort.Strings(names)
	return names
}

// QuoteIdent quotes one identifier part for PostgreSQL (sqlname.Postgres).
func QuoteIdent(s string) string { return sqlname.Postgres(s) }

// quoteLiteral quotes a string constant (sqlname.Literal).
func quoteLiteral(s string) string { return sqlname.Literal(s) }

// Render returns the SQL of every query name rendered for m (the claim for a
// batch of renderLimit rows, unbounded). It is what New runs once; it is
// exported for `queuebox migrate sql`-style inspection and for tests.
func Render(m dialect.Mapping, opts ...Option) (map[string]string, error) {
	o := newOptions(opts)
	for _, ident := range append(mapValues(m.Columns()), m.Schema(), m.TableName()) {
		if len(ident) > maxIdentLen {
			return nil, fmt.Errorf("postgres: identifier %q is longer than %d bytes", ident, maxIdentLen)
		}
	}
	if m.TableName() == "" {
		return nil, errors.New("postgres: empty mapping (use dialect.DefaultMapping or dialect.NewMapping)")
	}
	var names []string
	for _, name := range QueryNames() {
		if (o.lock || o.buckets) && leaseOnly[name] {
			continue // lock mode runs sql/lock/ instead (lock.go)
		}
		names = append(names, name)
	}
	return renderFiles(sqlFiles, "sql", names, m, o)
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func micros(d time.Duration) int64 { return d.Microseconds() }

// Claim implements dialect.Dialect.
func (d *Dialect) Claim(ctx context.Context, p dialect.ClaimParams) ([]outbox.Message, error) {
	c, err := d.ClaimNext(ctx, p)
	return c.Messages, err
}

// ClaimNext implements dialect.Sweeper.
func (d *Dialect) ClaimNext(ctx context.Context, p dialect.ClaimParams) (dialect.Claimed, error) {
	if p.Limit <= 0 {
		return dialect.Claimed{}, nil
	}
	if p.Lease <= 0 {
		return dialect.Claimed{}, errors.New("postgres: claim: lease must be positive")
	}
	query, kept, err := d.claims.sqlKept(shapeOf(p))
	if err != nil {
		return dialect.Claimed{}, err
	}
	switch {
	case d.turnSQL == "":
		return d.claim(ctx, query.sql, p)
	case p.Poll:
		return d.pollClaim(ctx, query.sql, p)
	}
	return d.turnClaim(ctx, query, kept, p)
}

// claimArgs are the bind parameters of claim.sql: the token, the lease and,
// for a windowed claim, where its window starts and the keys to skip
// (claimShapes.windowArgs).
func (d *Dialect) claimArgs(p dialect.ClaimParams) []any {
	return append([]any{p.Token, micros(p.Lease)}, d.claims.windowArgs(shapeOf(p), p)...)
}

func compareMessages(a, b outbox.Message) int {
	if a.Sequence != b.Sequence {
		if a.Sequence < b.Sequence {
			return -1
		}
		return 1
	}
	return strings.Compare(a.ID, b.ID)
}

// claim runs one rendered claim statement without a claim turn (replica
// turns: WithTableClaimTurns(false)); a claim with the table's turn is
// turnClaim, a poll pollClaim.
func (d *Dialect) claim(ctx context.Context, query string, p dialect.ClaimParams) (dialect.Claimed, error) {
	rows, err := d.pool.Query(ctx, query, d.claimArgs(p)...)
	// The statement's implicit transaction commits with its last message,
	// which scanRows reads (rows.Err reports a failed commit).
	return claimedRows(rows, err, p, func() error { return nil })
}

// claimedRows reads the rows of a claim statement, then commits the claim's
// transaction with commit; any error is the claim's.
func claimedRows(rows pgx.Rows, err error, p dialect.ClaimParams, commit func() error) (dialect.Claimed, error) {
	if err != nil {
		return dialect.Claimed{}, interpretError("claim", err)
	}
	c, err := scanClaim(rows, p)
	if err == nil {
		err = commit()
	}
	if err != nil {
		return dialect.Claimed{}, interpretError("claim", err)
	}
	return c, nil
}

// pollClaim is claim for a poll (dialect.ClaimParams.Poll): it tries the
// table's claim turn and returns no rows when another claim holds it. The
// try needs its answer before the claim is sent, so this takes a
// transaction of its own (four round trips instead of one; polls are the
// idle path). When another claim holds the turn it returns
// dialect.ErrClaimTurnBusy.
func (d *Dialect) pollClaim(ctx context.Context, query string, p dialect.ClaimParams) (dialect.Claimed, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return dialect.Claimed{}, interpretError("claim", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var free bool
	if err := tx.QueryRow(ctx, d.tryTurnSQL).Scan(&free); err != nil {
		return dialect.Claimed{}, interpretError("claim turn", err)
	}
	if !free {
		return dialect.Claimed{}, dialect.ErrClaimTurnBusy
	}
	rows, err := tx.Query(ctx, query, d.claimArgs(p)...)
	return claimedRows(rows, err, p, func() error { return tx.Commit(ctx) })
}

// claimTurnSpace is the high half of the claim turn's advisory lock key;
// the low half is the table's oid, so each table (whatever the search_path
// that names it) has its own turn (sql/claim_turn.tmpl).
const claimTurnSpace = 0x71627475 // "qbtu"

// Renew implements dialect.Dialect.
func (d *Dialect) Renew(ctx context.Context, p dialect.RenewParams) (int64, error) {
	if p.Lease <= 0 {
		return 0, errors.New("postgres: renew: lease must be positive")
	}
	return d.exec(ctx, "renew", p.Token, micros(p.Lease))
}

// Complete implements dialect.Dialect.
func (d *Dialect) Complete(ctx context.Context, p dialect.CompleteParams) (int64, error) {
	if len(p.IDs) == 0 {
		return 0, nil
	}
	return d.exec(ctx, "complete", p.Token, p.IDs)
}

// Retry implements dialect.Dialect.
func (d *Dialect) Retry(ctx context.Context, p dialect.RetryParams) (int64, error) {
	if len(p.Items) == 0 {
		return 0, nil
	}
	ids, attempts, delays, errs := retryColumns(p.Items)
	return d.exec(ctx, "retry", p.Token, ids, attempts, delays, errs)
}

// Dead implements dialect.Dialect.
func (d *Dialect) Dead(ctx context.Context, p dialect.DeadParams) (int64, error) {
	if len(p.Items) == 0 {
		return 0, nil
	}
	ids, attempts, errs := deadColumns(p.Items)
	return d.exec(ctx, "dead", p.Token, ids, attempts, errs)
}

// retryColumns are the parameter arrays of the retry statements (every
// claim mode's), one element per item.
func retryColumns(items []dialect.RetryItem) (ids []string, attempts []int32, delays []int64, errs []string) {
	ids, attempts = make([]string, len(items)), make([]int32, len(items))
	delays, errs = make([]int64, len(items)), make([]string, len(items))
	for i, it := range items {
		ids[i], attempts[i], delays[i], errs[i] = it.ID, int32(it.Attempt), micros(max(it.Delay, 0)), it.Error
	}
	return ids, attempts, delays, errs
}

// deadColumns are the parameter arrays of the dead statements (every claim
// mode's), one element per item.
func deadColumns(items []dialect.DeadItem) (ids []string, attempts []int32, errs []string) {
	ids, attempts, errs = make([]string, len(items)), make([]int32, len(items)), make([]string, len(items))
	for i, it := range items {
		ids[i], attempts[i], errs[i] = it.ID, int32(it.Attempt), it.Error
	}
	return ids, attempts, errs
}

// Release implements dialect.Dialect. An empty IDs releases nothing.
func (d *Dialect) Release(ctx context.Context, p dialect.ReleaseParams) (int64, error) {
	if len(p.IDs) == 0 {
		return 0, nil
	}
	return d.exec(ctx, "release", p.Token, p.IDs)
}

// ReleaseExpired implements dialect.Dialect.
func (d *Dialect) ReleaseExpired(ctx context.Context, p dialect.ReleaseExpiredParams) (int64, error) {
	if p.Limit <= 0 {
		return 0, nil
	}
	return d.exec(ctx, "release_expired", p.Limit)
}

func (d *Dialect) exec(ctx context.Context, name string, args ...any) (int64, error) {
	tag, err := d.pool.Exec(ctx, d.queries[name], args...)
	if err != nil {
		return 0, interpretError(name, err)
	}
	return tag.RowsAffected(), nil
}

// interpretError is the one place where PostgreSQL and driver errors are
// classified. Connection-level failures, serialization failures, deadlocks
// and server shutdowns stay retryable (the outbox default for any error);
// errors that no retry can fix (bad data, violated constraints, a table or
// column that does not exist, a trigger that raises an exception) are
// marked outbox.Permanent. Errors after which the statement may have run
// all the same (not the server's answer, and not surely unsent) are marked
// outbox.MaybeApplied. Errors are told apart by SQLSTATE and type, never by
// text.
func interpretError(query string, err error) error {
	if err == nil {
		return nil
	}
	wrapped := fmt.Errorf("postgres: %s: %w", query, err)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) && !neverSent(err) {
		// Not the server's answer, and maybe sent: the statement may have
		// committed before the connection broke.
		wrapped = outbox.MaybeApplied(wrapped)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return wrapped
	}
	if retryable(err) {
		return wrapped
	}
	if pgErr != nil {
		switch pgErr.Code[:2] {
		case "22", // data exception
			"23", // integrity constraint violation
			"42", // syntax error or access rule violation (missing table/column, no permission)
			"0A", // feature not supported
			"P0": // PL/pgSQL: a trigger's RAISE EXCEPTION, an ASSERT
			return outbox.Permanent(wrapped)
		}
	}
	return wrapped
}

// neverSent reports an error that came before the statement was sent:
// pgconn says so (SafeToRetry), or no connection could be opened for it
// (pgconn.ConnectError, from the pool opening a new connection).
func neverSent(err error) bool {
	var connectErr *pgconn.ConnectError
	var opErr *net.OpError
	return pgconn.SafeToRetry(err) || errors.As(err, &connectErr) || (errors.As(err, &opErr) && opErr.Op == "dial")
}

// retryable reports the failures a later attempt can get past.
func retryable(err error) bool {
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", // serialization_failure
			"40P01", // deadlock_detected
			"55P03", // lock_not_available
			"57014", // query_canceled (statement_timeout)
			"57P01", // admin_shutdown
			"57P02", // crash_shutdown
			"57P03", // cannot_connect_now
			"57P05": // idle_session_timeout
			return true
		}
		switch pgErr.Code[:2] {
		case "08", // connection exception
			"53": // insufficient resources
			return true
		}
		return false
	}
	// A connection that broke mid-query surfaces as a pgconn error that is
	// not a PgError; pgx.ErrTxClosed and friends are programming errors.
	return !errors.Is(err, pgx.ErrTxClosed)
}
