package postgres

import (
	"context"
	"crypto/md5"
	"embed"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

// BucketCount is how many buckets bucket mode spreads a table's keys over:
// the most relays that can share one table's work.
const BucketCount = 64

// bucketLockSpace is the high half of the advisory lock key that serializes
// the changes of bucket ownership (sql/buckets/lock.sql).
const bucketLockSpace = 0x71626275 // "qbbu"

//go:embed sql/buckets/*.sql
var bucketFiles embed.FS

// bucketQueryNames are bucket mode's statements beside its claim
// (sql/buckets/).
var bucketQueryNames = []string{"complete", "retry", "dead", "schema", "join", "heartbeat", "lock", "expire", "owners", "acquire", "release", "leave", "members"}

var (
	_ dialect.Dialect        = (*BucketDialect)(nil)
	_ dialect.Sweeper        = (*BucketDialect)(nil)
	_ dialect.ClaimForgetter = (*BucketDialect)(nil)
)

// BucketDialect is bucket mode (relay.claimMode: buckets; docs/claim.md):
// the relays on a table share its keys out in BucketCount buckets, each
// owned by one relay at a time, and a row is written once, when it is
// settled.
//
//   - Each relay is a member of the table's group while it renews its
//     membership, every Lease/24; the membership ends Lease after the last
//     renewal. The live members share the buckets: each takes buckets that
//     no live member owns until it has its share, and gives up, once its
//     rows in them are settled, buckets beyond its share.
//   - A claim reads ready rows of the owned buckets, leaving out the rows
//     in flight here, and writes nothing: a row in flight stays pending,
//     so its key's next row is not a head until it is settled.
//   - Complete, Retry and Dead are fenced on the bucket's owner and epoch
//     (the epoch grows each time the bucket changes hands) and on a live
//     membership. A relay that cannot renew its membership stops
//     publishing before it ends (the engine's lease: Renew renews the
//     membership); only then may another relay take its buckets, and its
//     late settlements change nothing.
//   - Release writes nothing: the row is still pending.
//
// Claims need no claim turn and no lease columns; the table needs only the
// pending, sent and dead state values. The operator surface (stats, dead
// list, replay, purge, check) is the embedded Dialect's.
type BucketDialect struct {
	*Dialect
	bq     map[string]string
	claims *claimShapes
	lease  time.Duration
	member string // this relay's member id
	name   string // host and pid, shown to operators

	claimMu sync.Mutex  // one claim at a time: a claim's rows are in flight before the next one reads
	cursor  frontCursor // claimMu

	mu       sync.Mutex
	tokens   map[string][]heldRow // the rows in flight, per claim token
	owned    map[int]int64        // bucket → epoch of its ownership
	draining map[int]bool         // owned buckets being given up: not claimed from
	lost     bool                 // the membership ended: every bucket may be owned elsewhere
	members  int                  // live members at the last heartbeat
	beatSent time.Time            // when the last successful renewal of the membership was sent
	reviewed chan struct{}        // wakes the review loop

	startMu sync.Mutex
	started bool
	stop    context.CancelFunc
	done    chan struct{}
}

// heldRow is one row in flight: its id, and the bucket and epoch it was
// claimed under.
type heldRow struct {
	id     string
	bucket int
	epoch  int64
}

// NewBucketMode renders the SQL of bucket mode for m and returns a dialect
// that runs it on pool. lease is the membership's length (relay.lease).
func NewBucketMode(pool *pgxpool.Pool, m dialect.Mapping, lease time.Duration, opts ...Option) (*BucketDialect, error) {
	opts = append(opts, func(o *options) { o.buckets = true })
	base, err := New(pool, m, opts...)
	if err != nil {
		return nil, err
	}
	if lease <= 0 {
		return nil, errors.New("postgres: bucket mode needs a positive lease")
	}
	if len(m.TableName())+len(memberSuffix) > maxIdentLen {
		return nil, fmt.Errorf("postgres: bucket mode: the table name %q is too long for its member table (%s, at most %d bytes)",
			m.TableName(), m.TableName()+memberSuffix, maxIdentLen)
	}
	bq, claims, err := renderBuckets(m, newOptions(opts))
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	return &BucketDialect{Dialect: base, bq: bq, claims: claims, lease: lease,
		member: uuid.NewString(), name: fmt.Sprintf("%s/%d", host, os.Getpid()),
		tokens: map[string][]heldRow{}, owned: map[int]int64{}, draining: map[int]bool{}, reviewed: make(chan struct{}, 1)}, nil
}

// RenderBuckets returns the SQL of bucket mode's statements rendered for m,
// its claim for a batch of renderLimit rows with a window of as many.
func RenderBuckets(m dialect.Mapping, opts ...Option) (map[string]string, error) {
	opts = append(opts, func(o *options) { o.buckets = true })
	out, claims, err := renderBuckets(m, newOptions(opts))
	if err != nil {
		return nil, err
	}
	if out["claim"], err = claims.sql(claimShape{limit: renderLimit, window: renderLimit}); err != nil {
		return nil, err
	}
	return out, nil
}

// renderBuckets renders bucket mode's statements for m, and its claim per
// shape.
func renderBuckets(m dialect.Mapping, o options) (map[string]string, *claimShapes, error) {
	out, err := renderFiles(bucketFiles, "sql/buckets", bucketQueryNames, m, o)
	if err != nil {
		return nil, nil, err
	}
	claims, err := newClaimShapes(bucketFiles, "sql/buckets/claim.sql", "$7", m, o)
	if err != nil {
		return nil, nil, err
	}
	return out, claims, nil
}

const (
	bucketSuffix = "_qb_buckets"
	memberSuffix = "_qb_members"
)

// bucketTables are the quoted names of bucket mode's tables for m: the
// table's name with _qb_buckets and _qb_members, in its schema.
func bucketTables(m dialect.Mapping) (buckets, members string) {
	q := func(name string) string {
		if m.Schema() == "" {
			return QuoteIdent(name)
		}
		return QuoteIdent(m.Schema()) + "." + QuoteIdent(name)
	}
	return q(m.TableName() + bucketSuffix), q(m.TableName() + memberSuffix)
}

// bucketOf is the bucket of a row with key and id: what bucketOf in
// sql/bucket.tmpl computes on the server.
func bucketOf(key, id string) int {
	if key == "" {
		key = id
	}
	sum := md5.Sum([]byte(key))
	return int(binary.BigEndian.Uint32(sum[:4]) % BucketCount)
}

// Member is this relay's member id in the table's group.
func (d *BucketDialect) Member() string { return d.member }

// Owned returns the buckets this relay owns, in order.
func (d *BucketDialect) Owned() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]int, 0, len(d.owned))
	for b := range d.owned {
		out = append(out, b)
	}
	slices.Sort(out)
	return out
}

// beat is how often the membership is renewed, and ownership reviewed.
func (d *BucketDialect) beat() time.Duration { return max(d.lease/24, 10*time.Millisecond) }

// keep is how long the membership must still run for a claim to return
// rows: the engine publishes a claim's rows for at most
// Lease − Lease/6 from the claim (relay/lease.go), so the membership
// outlives that by Lease/12 or more.
func (d *BucketDialect) keep() time.Duration { return d.lease - d.lease/12 }

// start creates the tables if missing, joins the group and starts the
// membership loop, once.
func (d *BucketDialect) start(ctx context.Context) error {
	d.startMu.Lock()
	defer d.startMu.Unlock()
	if d.started {
		return nil
	}
	var encoding string
	if err := d.pool.QueryRow(ctx, `SHOW server_encoding`).Scan(&encoding); err != nil {
		return interpretError("bucket mode: read the server encoding", err)
	}
	if encoding != "UTF8" && encoding != "SQL_ASCII" {
		return fmt.Errorf("bucket mode: the database's encoding is %s: the relay and the server hash keys to buckets alike only in a UTF8 database; use relay.claimMode: lease or lock here", encoding)
	}
	if err := d.checkNoLeases(ctx); err != nil {
		return err
	}
	if err := d.createTables(ctx); err != nil {
		return err
	}
	if err := d.join(ctx); err != nil {
		return err
	}
	if err := d.review(ctx); err != nil {
		return err
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.stop, d.done, d.started = cancel, make(chan struct{}), true
	go d.loop(lctx)
	return nil
}

// createTables creates bucket mode's tables when they are missing; when
// both exist, it only checks that the buckets are all there, so that a
// relay without CREATE on the schema runs on tables made beforehand.
func (d *BucketDialect) createTables(ctx context.Context) error {
	bt, mt := bucketTables(d.mapping)
	var exist bool
	var n int
	if err := d.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL`, bt, mt).Scan(&exist); err != nil {
		return interpretError("bucket mode: look for its tables", err)
	}
	if exist {
		if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM `+bt+` WHERE bucket BETWEEN 0 AND $1`, BucketCount-1).Scan(&n); err != nil {
			return interpretError("bucket mode: read "+bt, err)
		}
		if n == BucketCount {
			return nil
		}
	}
	if _, err := d.pool.Exec(ctx, d.bq["schema"]); err != nil {
		return interpretError("bucket mode: create its tables (grant CREATE on the outbox table's schema, or create them as docs/claim.md shows)", err)
	}
	return nil
}

// checkNoLeases refuses to start beside lease-mode relays: a row that is
// processing under a live lease means one is at work on the table, and
// both would publish the same rows.
func (d *BucketDialect) checkNoLeases(ctx context.Context) error {
	m := d.mapping
	if !m.HasState(outbox.StateProcessing) || !m.Has(dialect.ColLeaseExpiresAt) {
		return nil
	}
	state, _ := m.Column(dialect.ColState)
	lease, _ := m.Column(dialect.ColLeaseExpiresAt)
	var live bool
	q := fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE %s = %s AND %s > now())`,
		m.Table(QuoteIdent), QuoteIdent(state), quoteLiteral(m.State(outbox.StateProcessing)), QuoteIdent(lease))
	if err := d.pool.QueryRow(ctx, q).Scan(&live); err != nil {
		return interpretError("bucket mode: look for lease-mode relays", err)
	}
	if !live {
		// Rows a stopped lease-mode relay left processing: pending again,
		// or their keys would wait for ever.
		set := fmt.Sprintf("%s = %s", QuoteIdent(state), quoteLiteral(m.State(outbox.StatePending)))
		for _, c := range dialect.LeaseColumns {
			if col, ok := m.Column(c); ok {
				set += ", " + QuoteIdent(col) + " = NULL"
			}
		}
		q := fmt.Sprintf(`UPDATE %s SET %s WHERE %s = %s AND %s <= now()`, m.Table(QuoteIdent), set,
			QuoteIdent(state), quoteLiteral(m.State(outbox.StateProcessing)), QuoteIdent(lease))
		if _, err := d.pool.Exec(ctx, q); err != nil {
			return interpretError("bucket mode: return the rows a lease-mode relay left processing to pending", err)
		}
		return nil
	}
	return errors.New("bucket mode: rows are processing under a live lease, so a relay in lease mode is at work on this table; " +
		"every relay on a table must use the same relay.claimMode: stop the lease-mode relays (their rows go back to pending when they stop) and this relay starts claiming")
}

func (d *BucketDialect) join(ctx context.Context) error {
	sent := time.Now()
	if _, err := d.pool.Exec(ctx, d.bq["join"], d.member, d.name, micros(d.lease)); err != nil {
		return interpretError("bucket mode: join", err)
	}
	d.mu.Lock()
	d.lost, d.beatSent = false, sent
	d.mu.Unlock()
	return nil
}

// loop renews the membership every beat, and reviews the ownership of the
// buckets beside it (reviewLoop), until ctx ends; then it releases the
// buckets and leaves. A slow review never delays a renewal.
func (d *BucketDialect) loop(ctx context.Context) {
	defer close(d.done)
	var reviews sync.WaitGroup
	reviews.Add(1)
	go func() {
		defer reviews.Done()
		d.reviewLoop(ctx)
	}()
	t := time.NewTicker(d.beat())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			reviews.Wait()
			d.leave()
			return
		case <-t.C:
		}
		before := d.liveMembers()
		if err := d.heartbeat(ctx); err != nil {
			continue // the next beat tries again; claims stop when the membership runs short
		}
		d.mu.Lock()
		lost, draining := d.lost, len(d.draining) > 0
		d.mu.Unlock()
		if lost && d.join(ctx) != nil {
			continue
		}
		if lost || draining || d.liveMembers() != before {
			d.wakeReview()
		}
	}
}

// reviewLoop reviews the buckets every fourth beat, and when woken.
func (d *BucketDialect) reviewLoop(ctx context.Context) {
	t := time.NewTicker(4 * d.beat())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.reviewed:
		}
		_ = d.review(ctx) // a failed review changes nothing; the next one tries again
	}
}

func (d *BucketDialect) wakeReview() {
	select {
	case d.reviewed <- struct{}{}:
	default:
	}
}

func (d *BucketDialect) liveMembers() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.members
}

// heartbeat renews the membership. When it had ended, every bucket is
// dropped: another relay may own it by now, and the rows in flight in it
// can no longer be settled here (Renew then reports them lost).
func (d *BucketDialect) heartbeat(ctx context.Context) error {
	hctx, cancel := context.WithTimeout(ctx, d.lease/12)
	defer cancel()
	var live int64
	sent := time.Now()
	err := d.pool.QueryRow(hctx, d.bq["heartbeat"], d.member, micros(d.lease)).Scan(&live)
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		d.lost = true
		clear(d.owned)
		clear(d.draining)
		d.beatSent = time.Time{}
		return nil
	case err != nil:
		return interpretError("bucket mode: renew the membership", err)
	}
	d.members, d.beatSent = int(live), sent
	return nil
}

// bucketOwner is a bucket's row in the bucket table, as review reads it.
type bucketOwner struct {
	member *string
	epoch  int64
	live   bool // its owner's membership still runs
}

// review reads the ownership of every bucket and moves this relay toward
// its share: ceil(BucketCount ÷ live members). It drops buckets it finds
// owned elsewhere, gives up surplus buckets once their rows here are
// settled, and takes buckets that no live member owns. It runs under the
// buckets lock, in one transaction, after deleting ended memberships.
func (d *BucketDialect) review(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, d.lease/6)
	defer cancel()
	d.releaseDrained(rctx)
	got := map[int]int64{} // the buckets taken, with their epochs
	err := pgx.BeginFunc(rctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(rctx, d.bq["lock"]); err != nil {
			return err
		}
		if _, err := tx.Exec(rctx, d.bq["expire"]); err != nil {
			return err
		}
		all, err := d.readOwners(rctx, tx)
		if err != nil {
			return err
		}
		free := d.share(all)
		if len(free) == 0 {
			return nil
		}
		rows, err := tx.Query(rctx, d.bq["acquire"], d.member, free)
		if err != nil {
			return err
		}
		for rows.Next() {
			var (
				b int32
				e int64
			)
			if err := rows.Scan(&b, &e); err != nil {
				rows.Close()
				return err
			}
			got[int(b)] = e
		}
		return rows.Err()
	})
	if err != nil {
		return interpretError("bucket mode: review the buckets", err)
	}
	d.mu.Lock()
	if !d.lost {
		for b, e := range got {
			d.owned[b] = e
		}
	}
	d.mu.Unlock()
	return nil
}

// readOwners reads every bucket's owner, epoch and liveness.
func (d *BucketDialect) readOwners(ctx context.Context, tx pgx.Tx) ([]bucketOwner, error) {
	rows, err := tx.Query(ctx, d.bq["owners"])
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	all := make([]bucketOwner, BucketCount)
	for rows.Next() {
		var (
			b int32
			o bucketOwner
		)
		if err := rows.Scan(&b, &o.member, &o.epoch, &o.live); err != nil {
			return nil, err
		}
		if b >= 0 && int(b) < BucketCount {
			all[b] = o
		}
	}
	return all, rows.Err()
}

// share drops the buckets all shows owned elsewhere, marks the buckets
// beyond this relay's share as draining, and returns the buckets to take
// to reach it.
func (d *BucketDialect) share(all []bucketOwner) []int32 {
	members := map[string]bool{d.member: true}
	for _, o := range all {
		if o.live {
			members[*o.member] = true
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for b, e := range d.owned {
		if o := all[b]; o.member == nil || *o.member != d.member || o.epoch != e {
			delete(d.owned, b) // taken after this relay's membership ended
		}
	}
	live := max(d.members, len(members), 1)
	share := (BucketCount + live - 1) / live
	clear(d.draining)
	if extra := len(d.owned) - share; extra > 0 {
		// Give up the highest buckets beyond the share: no new claims from
		// them; releaseDrained hands them over once settled.
		owned := make([]int, 0, len(d.owned))
		for b := range d.owned {
			owned = append(owned, b)
		}
		slices.Sort(owned)
		for _, b := range owned[len(owned)-extra:] {
			d.draining[b] = true
		}
		return nil
	}
	if d.lost {
		return nil
	}
	// Free: no live owner; or this relay's own from before its membership
	// ended, or from a take whose commit it never heard of. Taking them
	// again moves the epoch on.
	var free []int32
	for b := 0; b < BucketCount && len(free) < share-len(d.owned); b++ {
		o := all[b]
		_, mine := d.owned[b]
		if !o.live || (!mine && o.member != nil && *o.member == d.member) {
			free = append(free, int32(b))
		}
	}
	return free
}

// releaseDrained gives up the draining buckets that have no row in flight
// here. It waits for a claim under way: the rows it reads from a bucket
// marked draining after the claim began are in flight once it returns.
func (d *BucketDialect) releaseDrained(ctx context.Context) {
	d.claimMu.Lock()
	defer d.claimMu.Unlock()
	d.mu.Lock()
	busy := map[int]bool{}
	for _, rows := range d.tokens {
		for _, r := range rows {
			busy[r.bucket] = true
		}
	}
	var bs []int32
	var es []int64
	for b := range d.draining {
		if !busy[b] {
			bs, es = append(bs, int32(b)), append(es, d.owned[b])
		}
	}
	d.mu.Unlock()
	if len(bs) == 0 {
		return
	}
	if _, err := d.pool.Exec(ctx, d.bq["release"], d.member, bs, es); err != nil {
		return // still owned; the next review tries again
	}
	d.mu.Lock()
	for _, b := range bs {
		delete(d.owned, int(b))
		delete(d.draining, int(b))
	}
	d.mu.Unlock()
}

// leave releases every bucket and ends the membership (shutdown). Rows
// still in flight stay pending: the next owner of their bucket delivers
// them.
func (d *BucketDialect) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d.mu.Lock()
	var bs []int32
	var es []int64
	for b, e := range d.owned {
		bs, es = append(bs, int32(b)), append(es, e)
	}
	clear(d.owned)
	clear(d.draining)
	d.lost = true
	d.mu.Unlock()
	if len(bs) > 0 {
		_, _ = d.pool.Exec(ctx, d.bq["release"], d.member, bs, es)
	}
	_, _ = d.pool.Exec(ctx, d.bq["leave"], d.member)
}

// Close leaves the group: the buckets are released for the other relays
// at once. It waits for the membership loop to end, and is idempotent.
func (d *BucketDialect) Close() {
	d.startMu.Lock()
	stop, done := d.stop, d.done
	d.stop = nil
	d.startMu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// Claim implements dialect.Dialect.
func (d *BucketDialect) Claim(ctx context.Context, p dialect.ClaimParams) ([]outbox.Message, error) {
	c, err := d.ClaimNext(ctx, p)
	return c.Messages, err
}

// ClaimNext implements dialect.Sweeper: it reads ready rows of the owned
// buckets and holds them in flight under p.Token. p.Lease and p.Poll are
// not used: the membership is the lease, and claims write nothing.
func (d *BucketDialect) ClaimNext(ctx context.Context, p dialect.ClaimParams) (dialect.Claimed, error) {
	if p.Limit <= 0 {
		return dialect.Claimed{}, nil
	}
	if p.Token == "" {
		return dialect.Claimed{}, errors.New("postgres: bucket claim: empty token")
	}
	if err := d.start(ctx); err != nil {
		return dialect.Claimed{}, err
	}
	d.claimMu.Lock()
	defer d.claimMu.Unlock()
	d.mu.Lock()
	if err := d.membershipShort(); err != nil {
		d.mu.Unlock()
		return dialect.Claimed{}, err
	}
	if _, dup := d.tokens[p.Token]; dup {
		d.mu.Unlock()
		return dialect.Claimed{}, fmt.Errorf("postgres: bucket claim: token %s is already in use", p.Token)
	}
	var buckets []int32 // nil: all of them
	from := make([]int32, 0, len(d.owned))
	fromEpochs := make([]int64, 0, len(d.owned))
	for b, e := range d.owned {
		if !d.draining[b] {
			from, fromEpochs = append(from, int32(b)), append(fromEpochs, e)
		}
	}
	if len(from) < BucketCount {
		buckets = from
	}
	epochs := epochsByBucket(d.owned)
	gen := bucketsGen(from, fromEpochs)
	ids := make([]string, 0, 64)
	for _, rows := range d.tokens {
		for _, r := range rows {
			ids = append(ids, r.id)
		}
	}
	d.mu.Unlock()
	if len(from) == 0 {
		return dialect.Claimed{}, nil // no bucket (yet): another relay owns them all
	}
	read := func(p dialect.ClaimParams) (dialect.Claimed, error) {
		shape := shapeOf(p)
		query, err := d.claims.sql(shape)
		if err != nil {
			return dialect.Claimed{}, err
		}
		// The pool's query mode, as for every other statement: the ids in
		// flight travel as a binary array, and the server parses the
		// statement once per connection; it still plans each execution
		// with the parameters' values (PlanEachExecution).
		args := append([]any{d.member, micros(d.keep()), ids, buckets, from, fromEpochs}, d.claims.windowArgs(shape, p)...)
		rows, err := d.pool.Query(ctx, query, args...)
		if err != nil {
			return dialect.Claimed{}, interpretError("bucket claim", err)
		}
		defer rows.Close()
		claimed, err := scanClaim(rows, p)
		if err != nil {
			return dialect.Claimed{}, interpretError("bucket claim", err)
		}
		return claimed, nil
	}
	q, cursor := d.cursor.from(p, gen, time.Now())
	claimed, err := read(q)
	if err == nil && cursor && len(claimed.Messages) == 0 {
		q, cursor = p, false // nothing past the cursor: from the front after all
		claimed, err = read(q)
	}
	if err != nil {
		return dialect.Claimed{}, err
	}
	d.cursor.found(q, cursor, gen, claimed, time.Now())
	if len(claimed.Messages) == 0 {
		return claimed, nil
	}
	held := make([]heldRow, len(claimed.Messages))
	for i, m := range claimed.Messages {
		b := bucketOf(m.Key, m.ID)
		held[i] = heldRow{id: m.ID, bucket: b, epoch: epochs[b]}
	}
	d.mu.Lock()
	d.tokens[p.Token] = held
	d.mu.Unlock()
	return claimed, nil
}

// bucketsGen is a fingerprint of the buckets a claim reads and their
// epochs, in any order: it changes when a bucket is taken (a new bucket,
// or an epoch that grew), whose rows may lie before the frontCursor.
func bucketsGen(buckets []int32, epochs []int64) int64 {
	var g uint64
	for i, b := range buckets {
		x := uint64(b)<<48 ^ uint64(epochs[i])
		// splitmix64's finaliser: a sum of well-mixed values does not
		// repeat when one bucket goes and another comes.
		x ^= x >> 30
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 27
		x *= 0x94d049bb133111eb
		x ^= x >> 31
		g += x
	}
	return int64(g)
}

// frontEvery is how often a bucket-mode relay's claims look for its rows
// from the front of the table rather than from its frontCursor.
const frontEvery = time.Second

// frontCursor is where a bucket-mode relay's own rows start. The table's
// front holds the rows of every relay's buckets, and a relay that runs
// ahead of the others would otherwise read past all their pending rows,
// at each claim, before it reached a row of its own. A claim at the front
// (no From, no skip list) starts instead at the window start that the last
// such claim found, for frontEvery after a claim that read from the
// table's front: the rows before it were then in flight here, not yet due
// or of other buckets. Rows that become due there in between (a retry's
// backoff ends, a release, a row committed late with a lower sequence)
// are found by the next claim from the front, at most frontEvery later,
// and at once when nothing past the cursor is ready. Taking a bucket (a
// change of gen) sends the next claim to the front.
type frontCursor struct {
	seq     int64
	ok      bool      // seq is set
	gen     int64     // the epochs of the buckets claimed from when seq was found
	scanned time.Time // the last claim from the table's front
}

// from returns the parameters of claim p: from the cursor when p is at the
// front, the cursor was found under gen, and the last claim from the
// front is recent; cursor says whether it is.
func (c *frontCursor) from(p dialect.ClaimParams, gen int64, now time.Time) (dialect.ClaimParams, bool) {
	if p.From != 0 || len(p.Skip) > 0 || p.Window <= 0 || !c.ok || c.gen != gen || now.Sub(c.scanned) >= frontEvery {
		return p, false
	}
	p.From = c.seq
	return p, true
}

// found records where the window of claim p (from the cursor or not) started.
func (c *frontCursor) found(p dialect.ClaimParams, cursor bool, gen int64, claimed dialect.Claimed, now time.Time) {
	if !cursor && (p.From != 0 || len(p.Skip) > 0 || p.Window <= 0) {
		return // a window of the engine's sweep: not where the rows start
	}
	if !cursor {
		c.scanned = now
	}
	c.ok = len(claimed.Messages) > 0 || claimed.More
	c.seq, c.gen = claimed.Start, gen
}

// membershipShort says why a claim cannot run now: the membership ended
// (the loop joins again), or its last renewal is too old for the claim's
// rows to be published for 5/6 of a lease before it could end (the
// database is slow or out of reach). d.mu is held.
func (d *BucketDialect) membershipShort() error {
	if d.lost {
		return errors.New("postgres: bucket mode: the membership ended (the database was out of reach for a lease); joining again")
	}
	if since := time.Since(d.beatSent); since > d.lease/12 {
		return fmt.Errorf("postgres: bucket mode: the membership was last renewed %v ago (the database is slow or out of reach); claims wait for a renewal", since.Round(time.Millisecond))
	}
	return nil
}

// epochsByBucket is the epochs of the owned buckets, indexed by bucket (0: not
// owned).
func epochsByBucket(owned map[int]int64) []int64 {
	out := make([]int64, BucketCount)
	for b, e := range owned {
		out[b] = e
	}
	return out
}

// Renew implements dialect.Dialect: it reports how many of the claim's
// rows are still in buckets owned under the epoch they were claimed in. It
// does not wait for the database: the membership loop renews every
// Lease/24, and Renew vouches for the claim only while the last successful
// renewal was sent less than Lease/12 ago. The engine counts its deadline
// from when it called Renew, which is then at most Lease/12 later than the
// renewal the membership runs from; the claim's rows stop 5/6 of a lease
// after that call, before the membership could end.
func (d *BucketDialect) Renew(_ context.Context, p dialect.RenewParams) (int64, error) {
	d.startMu.Lock()
	started := d.started
	d.startMu.Unlock()
	if !started {
		return 0, nil // nothing was claimed yet
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.membershipShort(); err != nil && !d.lost {
		return 0, err
	}
	var n int64
	for _, r := range d.tokens[p.Token] {
		if e, ok := d.owned[r.bucket]; ok && e == r.epoch {
			n++
		}
	}
	return n, nil
}

// Forget implements dialect.ClaimForgetter: the claim's rows that are
// still held here (their settlement could not be written) stop being in
// flight, so that the next claim may take them again.
func (d *BucketDialect) Forget(token string) {
	d.mu.Lock()
	delete(d.tokens, token)
	d.mu.Unlock()
}

// fence is the buckets of the rows ids of token and the epochs they were
// claimed under; a row not held here gets bucket -1, which no bucket is,
// so its settlement changes nothing.
func (d *BucketDialect) fence(token string, ids []string) ([]int32, []int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	buckets, epochs := make([]int32, len(ids)), make([]int64, len(ids))
	rows := d.tokens[token]
	for i, id := range ids {
		buckets[i] = -1
		for _, r := range rows {
			if r.id == id {
				buckets[i], epochs[i] = int32(r.bucket), r.epoch
				break
			}
		}
	}
	return buckets, epochs
}

// settled ends the rows ids of token in flight, and reports how many were.
func (d *BucketDialect) settled(token string, ids []string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	rows := d.tokens[token]
	var n int64
	for _, id := range ids {
		if i := slices.IndexFunc(rows, func(r heldRow) bool { return r.id == id }); i >= 0 {
			rows = slices.Delete(rows, i, i+1)
			n++
		}
	}
	if len(rows) == 0 {
		delete(d.tokens, token)
	} else {
		d.tokens[token] = rows
	}
	return n
}

// write runs a fenced settling statement whose rows are unnested with
// their buckets and epochs (retry.sql, dead.sql), and ends the rows in
// flight once it has committed.
func (d *BucketDialect) write(ctx context.Context, name, token string, ids []string, args ...any) (int64, error) {
	buckets, epochs := d.fence(token, ids)
	return d.exec(ctx, name, token, ids, append([]any{d.member, ids, buckets, epochs}, args...)...)
}

// exec runs statement name with args, then ends the rows ids of token in
// flight: their settlement is written, or fenced out for good.
func (d *BucketDialect) exec(ctx context.Context, name, token string, ids []string, args ...any) (int64, error) {
	tag, err := d.pool.Exec(ctx, d.bq[name], args...)
	if err != nil {
		return 0, interpretError("bucket "+name, err)
	}
	d.settled(token, ids)
	return tag.RowsAffected(), nil
}

// Complete implements dialect.Dialect. complete.sql finds the rows by
// their ids alone, so the rows not held under p.Token are left out here:
// their settlement changes nothing, as in the other settling statements.
func (d *BucketDialect) Complete(ctx context.Context, p dialect.CompleteParams) (int64, error) {
	if len(p.IDs) == 0 {
		return 0, nil
	}
	buckets, epochs := d.fence(p.Token, p.IDs)
	held := make([]string, 0, len(p.IDs))
	for i, id := range p.IDs {
		if buckets[i] >= 0 {
			held = append(held, id)
		}
	}
	return d.exec(ctx, "complete", p.Token, p.IDs, d.member, held, buckets, epochs)
}

// Retry implements dialect.Dialect.
func (d *BucketDialect) Retry(ctx context.Context, p dialect.RetryParams) (int64, error) {
	if len(p.Items) == 0 {
		return 0, nil
	}
	ids, attempts, delays, errs := retryColumns(p.Items)
	return d.write(ctx, "retry", p.Token, ids, attempts, delays, errs)
}

// Dead implements dialect.Dialect.
func (d *BucketDialect) Dead(ctx context.Context, p dialect.DeadParams) (int64, error) {
	if len(p.Items) == 0 {
		return 0, nil
	}
	ids, attempts, errs := deadColumns(p.Items)
	return d.write(ctx, "dead", p.Token, ids, attempts, errs)
}

// Release implements dialect.Dialect: a row in flight is still pending, so
// it only stops being in flight here; the next claim may take it again.
func (d *BucketDialect) Release(_ context.Context, p dialect.ReleaseParams) (int64, error) {
	return d.settled(p.Token, p.IDs), nil
}

// ReleaseExpired implements dialect.Dialect: nothing holds a row but the
// ownership of its bucket, which lapses with the membership.
func (d *BucketDialect) ReleaseExpired(context.Context, dialect.ReleaseExpiredParams) (int64, error) {
	return 0, nil
}

// LiveBucketMembers reports how many relays in bucket mode are members of
// m's table now (0 when bucket mode never ran on it). A relay in another
// claim mode must not start beside them: both would publish the same rows.
func LiveBucketMembers(ctx context.Context, pool *pgxpool.Pool, m dialect.Mapping) (int, error) {
	_, members := bucketTables(m)
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, members).Scan(&exists); err != nil || !exists {
		return 0, err
	}
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM `+members+` WHERE expires_at > clock_timestamp()`).Scan(&n)
	return n, err
}

// BucketMember is one relay of a bucket-mode table's group, as `queuebox
// stats` shows it.
type BucketMember struct {
	Member  string
	Name    string        // host/pid of the relay
	Live    bool          // its membership still runs
	Expires time.Duration // until its membership ends; negative: ended that long ago
	Buckets int           // buckets it owns
}

// Members reads the table's group: its members in the order they joined,
// and how many buckets no member owns. Both are empty when bucket mode
// never ran on the table.
func (d *BucketDialect) Members(ctx context.Context) (members []BucketMember, unowned int, err error) {
	_, mt := bucketTables(d.mapping)
	var exists bool
	if err := d.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, mt).Scan(&exists); err != nil || !exists {
		return nil, 0, err
	}
	rows, err := d.pool.Query(ctx, d.bq["members"])
	if err != nil {
		return nil, 0, interpretError("bucket mode: read the members", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			member    *string
			m         BucketMember
			ms, owned int64
		)
		if err := rows.Scan(&member, &m.Name, &m.Live, &ms, &owned); err != nil {
			return nil, 0, interpretError("bucket mode: read the members", err)
		}
		if member == nil {
			unowned = int(owned)
			continue
		}
		m.Member, m.Expires, m.Buckets = *member, time.Duration(ms)*time.Millisecond, int(owned)
		members = append(members, m)
	}
	slices.SortFunc(members, func(a, b BucketMember) int { return strings.Compare(a.Name+a.Member, b.Name+b.Member) })
	return members, unowned, rows.Err()
}
