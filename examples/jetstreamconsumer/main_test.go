package main

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/queuebox/queuebox/internal/testenv"
)

func TestJetStreamConsumer(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := testenv.Context(t, 30*time.Second)
	url := testenv.NATSURL(t)
	subject := testenv.UniqueName("qbtest.order.created.")
	js, stream := testenv.NATSStreamConfig(t, url, jetstream.StreamConfig{Subjects: []string{subject}, Duplicates: 100 * time.Millisecond})

	publish := func(id, body string) bool {
		m := nats.NewMsg(subject)
		m.Header.Set("Nats-Msg-Id", id)
		m.Data = []byte(body)
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return !ack.Duplicate
	}
	ada1 := `{"orderId":"o-1","customer":"ada","totalCents":1000}`
	publish("0190a5b8-0000-7000-8000-000000000001", ada1)
	publish("0190a5b8-0000-7000-8000-000000000002", `{"orderId":"o-2","customer":"ada","totalCents":250}`)
	publish("0190a5b8-0000-7000-8000-000000000003", `{"orderId":"o-3","customer":"bob","totalCents":99}`)
	// The relay redelivers o-1 after the duplicate window: stored twice.
	testenv.Eventually(t, 10*time.Second, func() bool {
		return publish("0190a5b8-0000-7000-8000-000000000001", ada1)
	}, "redelivery never stored")

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	cfg := Config{DatabaseURL: pg.URL, NATSURL: url, Stream: stream.CachedInfo().Config.Name, Subject: subject, Group: "customer-totals"}
	go func() { done <- run(runCtx, cfg, slog.New(slog.DiscardHandler)) }()

	// Done when the durable consumer has acked all four deliveries.
	testenv.Eventually(t, 15*time.Second, func() bool {
		c, err := js.Consumer(ctx, cfg.Stream, cfg.Group)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.AckFloor.Stream == 4
	}, "the consumer did not ack the 4 deliveries")

	totals := map[string][2]int64{}
	rows, err := pg.Pool.Query(ctx, `SELECT customer, orders, total_cents FROM customer_totals`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var c string
		var n, cents int64
		if err := rows.Scan(&c, &n, &cents); err != nil {
			t.Fatal(err)
		}
		totals[c] = [2]int64{n, cents}
	}
	if totals["ada"] != [2]int64{2, 1250} || totals["bob"] != [2]int64{1, 99} {
		t.Errorf("totals %v; want ada 2 orders 1250, bob 1 order 99 (o-1 applied once)", totals)
	}
	var recorded int
	if err := pg.Pool.QueryRow(ctx, `SELECT count(*) FROM queuebox_inbox WHERE consumer_group = 'customer-totals'`).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	if recorded != 3 {
		t.Errorf("%d ids in the inbox, want 3", recorded)
	}

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}
