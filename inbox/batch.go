package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
)

// maxBatch is the most receives one statement stores.
const maxBatch = 128

// pendingReceive is one Receive waiting for its batch.
type pendingReceive struct {
	ctx  context.Context
	row  Row
	id   string
	done chan receiveResult
}

type receiveResult struct {
	rc  Receipt
	err error
}

// batcher stores concurrent receives together: each of its flushers takes
// the receives waiting when it is free, up to maxBatch, and stores them
// with one statement and one commit. An idle table stores a lone receive
// at once; a busy one shares its round trips and WAL flushes.
type batcher struct {
	t     *Table
	queue chan *pendingReceive
	stop  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
}

// Batch makes Receive group concurrent calls into shared statements,
// with flushers statements in flight at once (at most the pool's size);
// Close stops it. Each caller still returns only after its row committed.
func (t *Table) Batch(flushers int) {
	b := &batcher{t: t, queue: make(chan *pendingReceive, maxBatch*flushers), stop: make(chan struct{})}
	for range max(flushers, 1) {
		b.wg.Add(1)
		go b.flush()
	}
	t.batch = b
}

// Close stops the batching flushers, if any, after the receives queued.
func (t *Table) Close() {
	if t.batch != nil {
		t.batch.once.Do(func() { close(t.batch.stop) })
		t.batch.wg.Wait()
	}
}

func (b *batcher) receive(ctx context.Context, r Row) (Receipt, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return Receipt{}, err
	}
	p := &pendingReceive{ctx: ctx, row: r, id: id.String(), done: make(chan receiveResult, 1)}
	select {
	case b.queue <- p:
	case <-ctx.Done():
		return Receipt{}, ctx.Err()
	case <-b.stop:
		return b.t.receiveOne(ctx, r)
	}
	res := <-p.done // once queued, the flusher answers even if ctx ends
	return res.rc, res.err
}

func (b *batcher) flush() {
	defer b.wg.Done()
	batch := make([]*pendingReceive, 0, maxBatch)
	for {
		select {
		case p := <-b.queue:
			batch = append(batch[:0], p)
		case <-b.stop:
			b.drain(batch)
			return
		}
	more:
		for len(batch) < maxBatch {
			select {
			case p := <-b.queue:
				batch = append(batch, p)
			default:
				break more
			}
		}
		b.store(batch)
	}
}

// drain stores what is still queued when the batcher stops, so that no
// caller waits for an answer that never comes.
func (b *batcher) drain(batch []*pendingReceive) {
	for {
		batch = batch[:0]
		for len(batch) < maxBatch {
			select {
			case p := <-b.queue:
				batch = append(batch, p)
				continue
			default:
			}
			break
		}
		if len(batch) == 0 {
			return
		}
		b.store(batch)
	}
}

// statementTimeout bounds one batch's statement, so that a database that
// stops answering fails the requests waiting for it (503) instead of
// holding them.
const statementTimeout = 30 * time.Second

// store runs one batch. A batch the database refuses for one element's
// data (class 22) is stored one receive at a time, so that only that one
// is refused.
func (b *batcher) store(batch []*pendingReceive) {
	live := batch[:0:0]
	for _, p := range batch {
		if p.ctx.Err() != nil {
			p.done <- receiveResult{err: p.ctx.Err()}
			continue
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	stored, err := b.exec(live)
	var pgErr *pgconn.PgError
	if err != nil && errors.As(err, &pgErr) && len(pgErr.Code) == 5 && pgErr.Code[:2] == "22" && len(live) > 1 {
		for _, p := range live {
			rc, err := b.t.receiveOne(p.ctx, p.row)
			p.done <- receiveResult{rc, err}
		}
		return
	}
	for _, p := range live {
		switch {
		case err != nil:
			p.done <- receiveResult{err: classify(err)}
		case stored[p.id]:
			p.done <- receiveResult{rc: Receipt{ID: p.id}}
		default:
			p.done <- receiveResult{rc: b.t.duplicate(p.ctx, p.row)}
		}
	}
}

func (b *batcher) exec(batch []*pendingReceive) (map[string]bool, error) {
	n := len(batch)
	ids, sources, keys, topics, payloads, headers := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	orderKeys, attempts, pull := make([]*string, n), make([]int32, n), make([]bool, n)
	for i, p := range batch {
		r := p.row
		ids[i], sources[i], keys[i], topics[i], payloads[i] = p.id, r.Source, r.IdempotencyKey, r.Topic, string(r.Payload)
		h, err := encodeHeaders(r.Headers)
		if err != nil {
			return nil, err
		}
		headers[i] = h
		if r.Key != "" {
			k := r.Key
			orderKeys[i] = &k
		}
		attempts[i], pull[i] = int32(maxAttempts(r)), r.Pull
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), statementTimeout)
	defer cancel()
	rows, err := b.t.pool.Query(ctx, b.t.receiveBatch, ids, sources, keys, topics, orderKeys, payloads, headers, attempts, pull)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	stored := make(map[string]bool, n)
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		stored[id] = true
	}
	return stored, rows.Err()
}

func encodeHeaders(h map[string]string) (string, error) {
	if len(h) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(h)
	return string(b), err
}

func maxAttempts(r Row) int {
	if r.MaxAttempts <= 0 {
		return DefaultMaxAttempts
	}
	return r.MaxAttempts
}
