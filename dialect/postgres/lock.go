package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

//go:embed sql/lock/*.sql
var lockFiles embed.FS

// lockQueryNames are the queries of lock mode (sql/lock/).
var lockQueryNames = []string{"claim", "complete", "dead", "retry"}

// DefaultLockTimeout bounds how long a lock-mode batch may hold its rows
// locked when NewLockMode is given no timeout.
const DefaultLockTimeout = 30 * time.Second

var (
	_ dialect.BatchDeadliner = (*LockDialect)(nil)
	_ dialect.Dialect        = (*LockDialect)(nil)
	_ dialect.BatchCommitter = (*LockDialect)(nil)
	_ dialect.Sweeper        = (*LockDialect)(nil)
)

// LockDialect is lock mode, for existing tables without lease columns or
// without a processing state value (docs/adopting.md): Claim locks a batch
// of head rows with FOR UPDATE SKIP LOCKED in a transaction that stays open
// while the batch is published; Complete, Retry and Dead write inside that
// transaction, and Commit (dialect.BatchCommitter) commits it. Any failure
// rolls the whole batch back: the rows stay pending, nothing is marked, and
// they are delivered again with the same ids. A crash drops the connection,
// which rolls back the same way. Renew and ReleaseExpired have nothing to
// do: the lock is the fence, and a lock never outlives its connection.
//
// Each batch in flight holds one pool connection for its whole life.
//
// The operator surface (stats, dead list, replay, purge, check) is the
// embedded Dialect's.
type LockDialect struct {
	*Dialect
	lockQueries map[string]string
	claims      *claimShapes // lock/claim.sql per limit
	timeout     time.Duration

	mu      sync.Mutex
	batches map[string]*lockedBatch
}

// lockedBatch is one claimed batch: its open transaction.
type lockedBatch struct {
	mu       sync.Mutex
	tx       pgx.Tx
	rows     int
	deadline time.Time   // when the lock timeout ends the batch
	err      error       // the first failure; Commit then rolls back
	timer    *time.Timer // ends the batch when the lock timeout passes
	closed   bool
}

// NewLockMode renders the SQL for m in lock mode and returns a dialect that
// runs it on pool. lockTimeout bounds the life of each batch's transaction
// (0: DefaultLockTimeout); a batch that is not committed within it is rolled
// back. The server enforces the same bound with
// idle_in_transaction_session_timeout, so locks are freed even when this
// process hangs.
func NewLockMode(pool *pgxpool.Pool, m dialect.Mapping, lockTimeout time.Duration, opts ...Option) (*LockDialect, error) {
	opts = append(opts, func(o *options) { o.lock = true })
	base, err := New(pool, m, opts...)
	if err != nil {
		return nil, err
	}
	if lockTimeout <= 0 {
		lockTimeout = DefaultLockTimeout
	}
	lq, err := RenderLock(m, opts...)
	if err != nil {
		return nil, err
	}
	claims, err := newClaimShapes(lockFiles, "sql/lock/claim.sql", "$1", m, newOptions(opts))
	if err != nil {
		return nil, err
	}
	return &LockDialect{Dialect: base, lockQueries: lq, claims: claims, timeout: lockTimeout, batches: map[string]*lockedBatch{}}, nil
}

// RenderLock returns the SQL of lock mode's queries rendered for m.
func RenderLock(m dialect.Mapping, opts ...Option) (map[string]string, error) {
	return renderFiles(lockFiles, "sql/lock", lockQueryNames, m, newOptions(opts))
}

// BatchDeadline implements dialect.BatchDeadliner: when the lock timeout
// ends the batch of token.
func (d *LockDialect) BatchDeadline(token string) (time.Time, bool) {
	b := d.batch(token)
	if b == nil {
		return time.Time{}, false
	}
	return b.deadline, true
}

// LockTimeout is the bound on each batch's transaction.
func (d *LockDialect) LockTimeout() time.Duration { return d.timeout }

// Claim implements dialect.Dialect: it opens the batch's transaction, locks
// up to Limit head rows and keeps the transaction under Token until Commit.
// No rows: the transaction ends at once. Lease is ignored.
func (d *LockDialect) Claim(ctx context.Context, p dialect.ClaimParams) ([]outbox.Message, error) {
	c, err := d.ClaimNext(ctx, p)
	return c.Messages, err
}

// ClaimNext implements dialect.Sweeper: Claim, and where the next window
// starts.
func (d *LockDialect) ClaimNext(ctx context.Context, p dialect.ClaimParams) (dialect.Claimed, error) {
	if p.Limit <= 0 {
		return dialect.Claimed{}, nil
	}
	if p.Token == "" {
		return dialect.Claimed{}, errors.New("postgres: lock claim: empty token")
	}
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return dialect.Claimed{}, interpretError("lock claim", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	// The server ends a batch whose owner went quiet: its locks go, its
	// rows stay pending.
	ms := strconv.FormatInt(max(d.timeout.Milliseconds(), 1), 10)
	if _, err := tx.Exec(ctx, `SELECT set_config('idle_in_transaction_session_timeout', $1, true),
		set_config('statement_timeout', $1, true)`, ms); err != nil {
		return dialect.Claimed{}, interpretError("lock claim", err)
	}
	query, err := d.claims.sql(shapeOf(p))
	if err != nil {
		return dialect.Claimed{}, err
	}
	// Unnamed and uncached (a database.url may turn pgx's caches off), so
	// planned at every execution with its parameter's value: a kept
	// prepared statement would keep a plan made for an idle poll on an
	// empty table (PlanEachExecution).
	args := append([]any{pgx.QueryExecModeExec}, d.claims.windowArgs(shapeOf(p), p)...)
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		return dialect.Claimed{}, interpretError("lock claim", err)
	}
	defer rows.Close()
	claimed, err := scanClaim(rows, p)
	if err != nil {
		return dialect.Claimed{}, interpretError("lock claim", err)
	}
	if len(claimed.Messages) == 0 {
		return claimed, nil // rolled back by the deferred call
	}
	b := &lockedBatch{tx: tx, rows: len(claimed.Messages), deadline: time.Now().Add(d.timeout)}
	d.mu.Lock()
	if _, dup := d.batches[p.Token]; dup {
		d.mu.Unlock()
		return dialect.Claimed{}, fmt.Errorf("postgres: lock claim: token %s is already in use", p.Token)
	}
	d.batches[p.Token] = b
	d.mu.Unlock()
	b.timer = time.AfterFunc(d.timeout, func() {
		b.fail(fmt.Errorf("the batch held its locks longer than the lock timeout (%v)", d.timeout))
	})
	ok = true
	return claimed, nil
}

// fail records the batch's first failure and rolls its transaction back
// (the rows stay pending). It is safe to call more than once.
func (b *lockedBatch) fail(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		b.err = err
	}
	if !b.closed {
		b.closed = true
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = b.tx.Rollback(ctx)
		cancel()
	}
}

func (d *LockDialect) batch(token string) *lockedBatch {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.batches[token]
}

// write runs one settling statement in the batch's transaction. Errors are
// permanent for the engine: a transaction that failed cannot be retried,
// and the whole batch is rolled back by Commit.
func (d *LockDialect) write(ctx context.Context, token, name string, args ...any) (int64, error) {
	b := d.batch(token)
	if b == nil {
		return 0, outbox.Permanent(fmt.Errorf("postgres: lock %s: no open batch for token %s", name, token))
	}
	b.mu.Lock()
	if b.closed {
		err := b.err
		b.mu.Unlock()
		return 0, outbox.Permanent(fmt.Errorf("postgres: lock %s: batch rolled back: %w", name, err))
	}
	tag, err := b.tx.Exec(ctx, d.lockQueries[name], args...)
	b.mu.Unlock()
	if err != nil {
		err = interpretError("lock "+name, err)
		b.fail(err)
		return 0, outbox.Permanent(err)
	}
	return tag.RowsAffected(), nil
}

// Renew implements dialect.Dialect: there is no lease; it reports how many
// rows the batch still holds locked (0 once it was rolled back).
func (d *LockDialect) Renew(_ context.Context, p dialect.RenewParams) (int64, error) {
	b := d.batch(p.Token)
	if b == nil {
		return 0, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, nil
	}
	return int64(b.rows), nil
}

// Complete implements dialect.Dialect, inside the batch's transaction.
func (d *LockDialect) Complete(ctx context.Context, p dialect.CompleteParams) (int64, error) {
	if len(p.IDs) == 0 {
		return 0, nil
	}
	return d.write(ctx, p.Token, "complete", p.IDs)
}

// Retry implements dialect.Dialect, inside the batch's transaction.
func (d *LockDialect) Retry(ctx context.Context, p dialect.RetryParams) (int64, error) {
	if len(p.Items) == 0 {
		return 0, nil
	}
	ids, attempts, delays, errs := retryColumns(p.Items)
	return d.write(ctx, p.Token, "retry", ids, attempts, delays, errs)
}

// Dead implements dialect.Dialect, inside the batch's transaction.
func (d *LockDialect) Dead(ctx context.Context, p dialect.DeadParams) (int64, error) {
	if len(p.Items) == 0 {
		return 0, nil
	}
	ids, attempts, errs := deadColumns(p.Items)
	return d.write(ctx, p.Token, "dead", ids, attempts, errs)
}

// Release implements dialect.Dialect: a locked row was never changed, so
// leaving it as it is returns it to pending when the lock goes. It reports
// the rows as released while the batch is open.
func (d *LockDialect) Release(_ context.Context, p dialect.ReleaseParams) (int64, error) {
	b := d.batch(p.Token)
	if b == nil {
		return 0, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, nil
	}
	return int64(len(p.IDs)), nil
}

// ReleaseExpired implements dialect.Dialect: locks never outlive their
// connection, so nothing expires.
func (d *LockDialect) ReleaseExpired(context.Context, dialect.ReleaseExpiredParams) (int64, error) {
	return 0, nil
}

// Commit implements dialect.BatchCommitter: it commits the batch's writes,
// or, if any step of the batch failed or the lock timeout passed, rolls
// them back and returns why.
func (d *LockDialect) Commit(ctx context.Context, token string) error {
	d.mu.Lock()
	b := d.batches[token]
	delete(d.batches, token)
	d.mu.Unlock()
	if b == nil {
		return nil // an empty claim: nothing was kept
	}
	if b.timer != nil {
		b.timer.Stop()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("postgres: lock mode: batch rolled back: %w", b.err)
	}
	b.closed = true
	if err := b.tx.Commit(ctx); err != nil {
		_ = b.tx.Rollback(context.WithoutCancel(ctx))
		return interpretError("lock commit", err)
	}
	return nil
}

// Close rolls back every batch still open (shutdown after the engine
// stopped). It is idempotent.
func (d *LockDialect) Close() {
	d.mu.Lock()
	batches := d.batches
	d.batches = map[string]*lockedBatch{}
	d.mu.Unlock()
	for _, b := range batches {
		if b.timer != nil {
			b.timer.Stop()
		}
		b.fail(errors.New("dialect closed"))
	}
}
