package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The bare loop is the ceiling a relay is measured against: one loop that
// claims a batch with FOR UPDATE SKIP LOCKED (keyed: head-of-key rows only,
// the relay's rule), publishes it (JetStream asynchronously with
// Nats-Msg-Id; HTTP POSTs at the relay's concurrency), marks the batch sent
// in one UPDATE and commits. No lease, no fencing, no retries, no routing:
// what is left is the database and the broker.

const bareClaimUnkeyed = `SELECT id::text, topic, key, payload::text FROM outbox
WHERE state = 'pending' AND scheduled_at <= now()
ORDER BY sequence, id LIMIT $1 FOR UPDATE SKIP LOCKED`

const bareClaimKeyed = `SELECT c.id::text, c.topic, c.key, c.payload::text FROM outbox AS c
WHERE c.state = 'pending' AND c.scheduled_at <= now()
  AND (c.key IS NULL OR c.key = '' OR NOT EXISTS (
       SELECT 1 FROM outbox AS b
       WHERE b.key = c.key AND b.state IN ('pending', 'processing')
         AND b.sequence <= c.sequence AND (b.sequence < c.sequence OR b.id < c.id)))
ORDER BY c.sequence, c.id LIMIT $1 FOR UPDATE OF c SKIP LOCKED`

const bareComplete = `UPDATE outbox SET state = 'sent', updated_at = now() WHERE id = ANY($1::uuid[])`

type bareRow struct {
	id, topic string
	key       *string
	payload   []byte
}

// publishFunc publishes one batch and returns when every message is acked.
type publishFunc func(ctx context.Context, rows []bareRow) error

// bareLoop drains the schema and returns the rows it marked sent.
func bareLoop(ctx context.Context, s *schema, keyed bool, batch int, publish publishFunc) (int, error) {
	q := bareClaimUnkeyed
	if keyed {
		q = bareClaimKeyed
	}
	total := 0
	rows := make([]bareRow, 0, batch)
	ids := make([]string, 0, batch)
	for {
		rows, ids = rows[:0], ids[:0]
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			rs, err := tx.Query(ctx, q, batch)
			if err != nil {
				return err
			}
			for rs.Next() {
				var r bareRow
				if err := rs.Scan(&r.id, &r.topic, &r.key, &r.payload); err != nil {
					rs.Close()
					return err
				}
				rows = append(rows, r)
				ids = append(ids, r.id)
			}
			if err := rs.Err(); err != nil {
				return err
			}
			if len(rows) == 0 {
				return nil
			}
			if err := publish(ctx, rows); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, bareComplete, ids)
			return err
		})
		if err != nil {
			return total, fmt.Errorf("bare loop: %w", err)
		}
		if len(rows) == 0 {
			return total, nil
		}
		total += len(rows)
	}
}

// barePublishNATS publishes asynchronously to subject with the relay's
// headers and waits for every PubAck.
func barePublishNATS(js jetstream.JetStream, subject string) publishFunc {
	return func(ctx context.Context, rows []bareRow) error {
		futs := make([]jetstream.PubAckFuture, 0, len(rows))
		for i := range rows {
			r := &rows[i]
			h := nats.Header{"Nats-Msg-Id": {r.id}, "X-Topic": {r.topic}, "X-Attempt": {"0"}}
			if r.key != nil && *r.key != "" {
				h["X-Message-Key"] = []string{*r.key}
			}
			f, err := js.PublishMsgAsync(&nats.Msg{Subject: subject, Header: h, Data: r.payload})
			if err != nil {
				return err
			}
			futs = append(futs, f)
		}
		for _, f := range futs {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
}

// barePublishHTTP POSTs every row to url with at most concurrency requests
// in flight.
func barePublishHTTP(client *http.Client, url string, concurrency int) publishFunc {
	return func(ctx context.Context, rows []bareRow) error {
		sem := make(chan struct{}, concurrency)
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			first error
		)
		for i := range rows {
			r := &rows[i]
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(r.payload))
				if err == nil {
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("X-Message-Id", r.id)
					req.Header.Set("Idempotency-Key", r.id)
					req.Header.Set("X-Topic", r.topic)
					req.Header.Set("X-Attempt", "0")
					if r.key != nil && *r.key != "" {
						req.Header.Set("X-Message-Key", *r.key)
					}
					var resp *http.Response
					if resp, err = client.Do(req); err == nil {
						resp.Body.Close()
						if resp.StatusCode/100 != 2 {
							err = fmt.Errorf("status %s", strconv.Itoa(resp.StatusCode))
						}
					}
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return first
	}
}

func httpClient(concurrency int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = concurrency
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}
