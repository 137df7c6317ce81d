package inbox_test

// The judged scenario: the relay crashes after a publish and before it
// marks the row sent, then the row is delivered again beyond JetStream's
// duplicate window, so the broker stores the message twice. The consumer,
// deduplicating with the inbox in its own transaction, applies the business
// effect exactly once.

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/queuebox/queuebox/destination"
	natsdest "github.com/queuebox/queuebox/destination/nats"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/dialect/postgres"
	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/inbox/natsinbox"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/producer"
	"github.com/queuebox/queuebox/relay"
	"github.com/queuebox/queuebox/router"
)

const dupWindow = 100 * time.Millisecond

// consumer applies order events exactly once: the inbox record and the
// business effect (a counter per order) commit in one transaction, and the
// message is acked after the commit.
type consumer struct {
	pool  *pgxpool.Pool
	inbox *inbox.Inbox
	group string
}

func (c *consumer) setup(t *testing.T, ctx context.Context) {
	t.Helper()
	if _, err := c.pool.Exec(ctx, `CREATE TABLE order_effects (order_id text PRIMARY KEY, applied integer NOT NULL)`); err != nil {
		t.Fatal(err)
	}
}

func (c *consumer) handle(ctx context.Context, m jetstream.Msg) (applied bool, err error) {
	id, ok := natsinbox.FromJetStream(m)
	if !ok {
		return false, errors.New("delivery without Nats-Msg-Id")
	}
	var ev struct {
		OrderID string `json:"orderId"`
	}
	if err := json.Unmarshal(m.Data(), &ev); err != nil {
		return false, err
	}
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	isNew, err := c.inbox.RecordPgx(ctx, tx, c.group, id)
	if err != nil {
		return false, err
	}
	if isNew {
		if _, err := tx.Exec(ctx, `INSERT INTO order_effects (order_id, applied) VALUES ($1, 1)
			ON CONFLICT (order_id) DO UPDATE SET applied = order_effects.applied + 1`, ev.OrderID); err != nil {
			return false, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return false, err
	}
	return isNew, m.Ack()
}

// consumeAll fetches every message of the stream through a fresh consumer
// and hands each to c; it returns the deliveries seen and how many were
// applied.
func (c *consumer) consumeAll(t *testing.T, ctx context.Context, s jetstream.Stream, want int) (ids []string, applied int) {
	t.Helper()
	cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		t.Fatal(err)
	}
	for len(ids) < want {
		batch, err := cons.Fetch(want-len(ids), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			id, _ := natsinbox.FromJetStream(m)
			ids = append(ids, id)
			ok, err := c.handle(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				applied++
			}
		}
		if err := batch.Error(); err != nil {
			t.Fatal(err)
		}
		if n == 0 && ctx.Err() != nil {
			t.Fatalf("got %d of %d deliveries", len(ids), want)
		}
	}
	return ids, applied
}

func (c *consumer) effect(t *testing.T, ctx context.Context, orderID string) int {
	t.Helper()
	var n int
	if err := c.pool.QueryRow(ctx, `SELECT applied FROM order_effects WHERE order_id = $1`, orderID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// crashedRelay is the database side of a relay process that dies right
// after its first claim: it never writes to the table again (no renew, no
// complete, no release), so its lease simply runs out.
type crashedRelay struct {
	dialect.Dialect
	dead atomic.Bool
}

func (c *crashedRelay) Claim(ctx context.Context, p dialect.ClaimParams) ([]outbox.Message, error) {
	if c.dead.Load() {
		return nil, nil
	}
	msgs, err := c.Dialect.Claim(ctx, p)
	if len(msgs) > 0 {
		c.dead.Store(true)
	}
	return msgs, err
}
func (c *crashedRelay) Renew(context.Context, dialect.RenewParams) (int64, error) { return 0, nil }
func (c *crashedRelay) Complete(context.Context, dialect.CompleteParams) (int64, error) {
	return 0, nil
}
func (c *crashedRelay) Retry(context.Context, dialect.RetryParams) (int64, error) { return 0, nil }
func (c *crashedRelay) Dead(context.Context, dialect.DeadParams) (int64, error)   { return 0, nil }
func (c *crashedRelay) Release(context.Context, dialect.ReleaseParams) (int64, error) {
	return 0, nil
}
func (c *crashedRelay) ReleaseExpired(context.Context, dialect.ReleaseExpiredParams) (int64, error) {
	return 0, nil
}

// signalling reports each successful publish of a destination.
type signalling struct {
	destination.Destination
	published chan<- []outbox.Message
}

func (s *signalling) Publish(ctx context.Context, msgs []outbox.Message) error {
	err := s.Destination.Publish(ctx, msgs)
	if err == nil {
		select {
		case s.published <- msgs:
		default:
		}
	}
	return err
}

func TestExactlyOnceAcrossRelayCrash(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	pg, _ := migrated(t)
	url := testenv.NATSURL(t)
	subject := testenv.UniqueName("qbtest.orders.")
	_, stream := testenv.NATSStreamConfig(t, url, jetstream.StreamConfig{Subjects: []string{subject}, Duplicates: dupWindow})
	streamName := stream.CachedInfo().Config.Name

	ib, _ := inbox.New()
	c := &consumer{pool: pg.Pool, inbox: ib, group: "order-effects"}
	c.setup(t, ctx)

	// 1. The service writes an order event in its transaction.
	w, err := producer.New()
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pg.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := w.WritePgx(ctx, tx, producer.Message{Topic: subject, Key: "o-1", Payload: map[string]string{"orderId": "o-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	id := ids[0]

	d, err := postgres.New(pg.Pool, dialect.DefaultMapping())
	if err != nil {
		t.Fatal(err)
	}
	rt, err := router.New([]router.RouteSpec{{Pattern: "**", Destination: "events"}})
	if err != nil {
		t.Fatal(err)
	}
	newDest := func() destination.Destination {
		nd, err := natsdest.New(ctx, natsdest.Options{Name: "events", Servers: []string{url}, Subject: "{{ topic }}", Stream: streamName}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		return nd
	}

	// 2. Relay A claims the row with a 1s lease, publishes it to JetStream,
	// and crashes before it marks the row sent.
	const lease = time.Second
	publishedA := make(chan []outbox.Message, 1)
	engA, err := relay.New(&crashedRelay{Dialect: d}, rt,
		map[string]destination.Destination{"events": &signalling{newDest(), publishedA}},
		relay.Options{Lease: lease, PollInterval: 20 * time.Millisecond, ShutdownTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctxA, stopA := context.WithCancel(ctx)
	doneA := make(chan struct{})
	go func() { defer close(doneA); _ = engA.Run(ctxA) }()
	t.Cleanup(func() { stopA(); <-doneA })
	var firstPublish time.Time
	select {
	case msgs := <-publishedA:
		firstPublish = time.Now()
		if len(msgs) != 1 || msgs[0].ID != id {
			t.Fatalf("relay A published %+v, want id %s", msgs, id)
		}
	case <-ctx.Done():
		t.Fatal("relay A never published")
	}
	var state string
	if err := pg.Pool.QueryRow(ctx, `SELECT state FROM outbox WHERE id = $1`, id).Scan(&state); err != nil || state != "processing" {
		t.Fatalf("after the crash the row is %q (%v), want processing", state, err)
	}

	// 3. Relay B (a healthy replica) releases the expired lease, claims the
	// row again and publishes it with the same id, long after the
	// duplicate window, and marks it sent.
	publishedB := make(chan []outbox.Message, 1)
	engB, err := relay.New(d, rt,
		map[string]destination.Destination{"events": &signalling{newDest(), publishedB}},
		relay.Options{Lease: 30 * time.Second, PollInterval: 20 * time.Millisecond, ReapInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctxB, stopB := context.WithCancel(ctx)
	doneB := make(chan struct{})
	go func() { defer close(doneB); _ = engB.Run(ctxB) }()
	t.Cleanup(func() { stopB(); <-doneB })
	select {
	case msgs := <-publishedB:
		if len(msgs) != 1 || msgs[0].ID != id {
			t.Fatalf("relay B published %+v, want id %s", msgs, id)
		}
		if gap := time.Since(firstPublish); gap < dupWindow {
			t.Fatalf("redelivery %s after the first publish, inside the %s window", gap, dupWindow)
		}
	case <-ctx.Done():
		t.Fatal("relay B never redelivered")
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		var s string
		_ = pg.Pool.QueryRow(ctx, `SELECT state FROM outbox WHERE id = $1`, id).Scan(&s)
		return s == "sent"
	}, "row %s never marked sent by relay B", id)

	// JetStream stored both publishes: its duplicate window did not help.
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages, want 2 (the publish and the redelivery)", info.State.Msgs)
	}

	// 4. The consumer sees two deliveries of one id and applies one.
	seen, applied := c.consumeAll(t, ctx, stream, 2)
	if seen[0] != id || seen[1] != id {
		t.Errorf("deliveries carry ids %v, want %s twice", seen, id)
	}
	if applied != 1 {
		t.Errorf("applied %d deliveries, want 1", applied)
	}
	if n := c.effect(t, ctx, "o-1"); n != 1 {
		t.Errorf("business effect applied %d times, want exactly 1", n)
	}
	t.Logf("first publish, crash, redelivery after %s (window %s), stream messages %d, effect applied %d time(s)",
		time.Since(firstPublish).Round(time.Millisecond), dupWindow, info.State.Msgs, c.effect(t, ctx, "o-1"))
}

// TestExactlyOnceBeyondDuplicateWindow is the same scenario without a
// relay: the same message id is published twice, the second time once
// JetStream no longer reports it as a duplicate (the window has passed).
func TestExactlyOnceBeyondDuplicateWindow(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	pg, _ := migrated(t)
	url := testenv.NATSURL(t)
	subject := testenv.UniqueName("qbtest.orders.")
	js, stream := testenv.NATSStreamConfig(t, url, jetstream.StreamConfig{Subjects: []string{subject}, Duplicates: dupWindow})

	ib, _ := inbox.New()
	c := &consumer{pool: pg.Pool, inbox: ib, group: "order-effects"}
	c.setup(t, ctx)

	id := "0190a5b8-0000-7000-8000-00000000abcd"
	publish := func() *jetstream.PubAck {
		m := nats.NewMsg(subject)
		m.Header.Set(natsinbox.HeaderMsgID, id)
		m.Data = []byte(`{"orderId":"o-2"}`)
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return ack
	}
	if ack := publish(); ack.Duplicate {
		t.Fatal("first publish reported as duplicate")
	}
	// Inside the window the broker absorbs the redelivery; keep
	// redelivering until the window has passed and it is stored again.
	var duplicates int
	testenv.Eventually(t, 10*time.Second, func() bool {
		if publish().Duplicate {
			duplicates++
			return false
		}
		return true
	}, "JetStream kept reporting duplicates")
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages, want 2", info.State.Msgs)
	}
	_, applied := c.consumeAll(t, ctx, stream, 2)
	if applied != 1 || c.effect(t, ctx, "o-2") != 1 {
		t.Errorf("applied %d, effect %d; want 1 and 1", applied, c.effect(t, ctx, "o-2"))
	}
	t.Logf("%d publishes absorbed by the window, then stored twice; effect applied once", duplicates)
}
