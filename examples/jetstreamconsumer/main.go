// Command jetstreamconsumer is an example JetStream consumer that applies
// each order.created event exactly once with package inbox: the inbox
// record and the business effect (per-customer order totals) commit in one
// PostgreSQL transaction, and the message is acked only after the commit.
// A redelivery (the relay delivers at least once; JetStream's duplicate
// window is finite) finds the id recorded and is acked without effect.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable \
//	  go run ./examples/jetstreamconsumer -stream ORDERS -subject order.created
//
// It applies the inbox migrations and creates its customer_totals table at
// start.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/inbox/natsinbox"
)

// Config is what the consumer needs.
type Config struct {
	DatabaseURL string
	NATSURL     string
	Stream      string // an existing stream
	Subject     string // filter subject
	Group       string // consumer group: the durable name and the inbox group
}

func main() {
	var c Config
	flag.StringVar(&c.NATSURL, "nats", nats.DefaultURL, "NATS URL")
	flag.StringVar(&c.Stream, "stream", "ORDERS", "stream to consume")
	flag.StringVar(&c.Subject, "subject", "order.created", "filter subject")
	flag.StringVar(&c.Group, "group", "customer-totals", "consumer group")
	flag.Parse()
	c.DatabaseURL = os.Getenv("DATABASE_URL")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	err := run(ctx, c, log)
	stop()
	if err != nil {
		log.Error("jetstreamconsumer failed", "err", err)
		os.Exit(1)
	}
}

// run consumes until ctx ends.
func run(ctx context.Context, c Config, log *slog.Logger) error {
	if c.DatabaseURL == "" {
		return errors.New("DATABASE_URL is not set")
	}
	pool, err := pgxpool.New(ctx, c.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	err = inbox.Migrate(ctx, db, inbox.PostgreSQL)
	db.Close()
	if err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS customer_totals (
		customer    TEXT PRIMARY KEY,
		orders      INTEGER NOT NULL,
		total_cents BIGINT NOT NULL)`); err != nil {
		return err
	}
	ib, err := inbox.New()
	if err != nil {
		return err
	}

	nc, err := nats.Connect(c.NATSURL, nats.Name("jetstreamconsumer"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, c.Stream, jetstream.ConsumerConfig{
		Durable:       c.Group,
		FilterSubject: c.Subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    -1,
	})
	if err != nil {
		return fmt.Errorf("consumer on stream %s: %w", c.Stream, err)
	}
	a := &applier{pool: pool, inbox: ib, group: c.Group, log: log}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if err := a.handle(ctx, m); err != nil {
			log.Warn("event not applied; redelivering later", "err", err)
			_ = m.NakWithDelay(time.Second)
		}
	})
	if err != nil {
		return err
	}
	log.Info("consuming", "stream", c.Stream, "subject", c.Subject, "group", c.Group)
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	return nil
}

// Order is the payload of order.created (see examples/orderservice).
type Order struct {
	ID         string `json:"orderId"`
	Customer   string `json:"customer"`
	TotalCents int64  `json:"totalCents"`
}

type applier struct {
	pool  *pgxpool.Pool
	inbox *inbox.Inbox
	group string
	log   *slog.Logger
}

// handle applies one delivery exactly once, then acks it. Its span is the
// child of the relay's span (the message's traceparent), so one trace runs
// from the producer's request through the outbox, the relay and JetStream
// to here; spans are exported once the program sets an OpenTelemetry
// TracerProvider (otel.SetTracerProvider), and otherwise only the trace id
// is logged.
func (a *applier) handle(ctx context.Context, m jetstream.Msg) error {
	ctx, span := otel.Tracer("jetstreamconsumer").Start(natsinbox.ContextFromJetStream(ctx, m), "process "+m.Subject(),
		trace.WithSpanKind(trace.SpanKindConsumer))
	defer span.End()
	id, ok := natsinbox.FromJetStream(m)
	if !ok {
		// Without an id there is nothing to deduplicate on: refuse it
		// rather than risk applying it twice.
		a.log.Error("event without Nats-Msg-Id; terminated", "subject", m.Subject())
		return m.Term()
	}
	var o Order
	if err := json.Unmarshal(m.Data(), &o); err != nil || o.Customer == "" {
		a.log.Error("malformed event; terminated", "id", id, "err", err)
		return m.Term()
	}

	tx, err := a.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	isNew, err := a.inbox.RecordPgx(ctx, tx, a.group, id)
	if err != nil {
		return err
	}
	if isNew {
		if _, err := tx.Exec(ctx, `INSERT INTO customer_totals (customer, orders, total_cents) VALUES ($1, 1, $2)
			ON CONFLICT (customer) DO UPDATE SET orders = customer_totals.orders + 1,
			                                     total_cents = customer_totals.total_cents + EXCLUDED.total_cents`,
			o.Customer, o.TotalCents); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	a.log.Debug("event handled", "id", id, "applied", isNew, "trace_id", span.SpanContext().TraceID().String())
	// Acked after the commit: a crash in between redelivers, and the
	// inbox absorbs it.
	return m.Ack()
}
