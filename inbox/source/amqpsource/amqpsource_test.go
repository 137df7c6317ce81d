package amqpsource_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/inbox/intake"
	"github.com/queuebox/queuebox/inbox/source"
	"github.com/queuebox/queuebox/inbox/source/amqpsource"
	"github.com/queuebox/queuebox/internal/testenv"
)

// TestRabbitMQSource publishes with amqp091-go: a message with message_id
// sent twice, one with only a configured header, one without any id and
// one that is not JSON. Two rows are stored; every delivery is settled
// (the unusable ones rejected), and the queue is empty.
func TestRabbitMQSource(t *testing.T) {
	url := testenv.AMQPURL(t)
	admin := testenv.NewAMQPAdmin(t, url)
	queue := admin.Queue("inbox", "", "")
	pg := testenv.InboxPostgres(t)
	ctx := testenv.Context(t, time.Minute)
	table, err := inbox.NewTable(pg.Pool, inbox.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	pub := func(p amqp.Publishing) {
		if err := ch.PublishWithContext(ctx, "", queue, false, false, p); err != nil {
			t.Fatal(err)
		}
	}
	pub(amqp.Publishing{MessageId: "m-1", Body: []byte(`{"n":1}`)})
	pub(amqp.Publishing{MessageId: "m-1", Body: []byte(`{"n":1}`)})
	pub(amqp.Publishing{Headers: amqp.Table{"X-Request-Id": "r-2"}, Body: []byte(`{"n":2}`)})
	pub(amqp.Publishing{Body: []byte(`{"n":3}`)})
	pub(amqp.Publishing{MessageId: "m-4", Body: []byte(`nope`)})
	idem, _ := intake.NewField("X-Request-Id", "")
	sink := &source.Sink{Store: table, Rules: intake.Rules{Source: "rabbit", IdempotencyKey: idem, Headers: intake.NewHeaderPolicy()}}
	src, err := amqpsource.New(ctx, sink, amqpsource.Options{URL: url, Queue: queue, Headers: sink.Rules.Headers})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = src.Run(rctx) }()
	testenv.Eventually(t, 20*time.Second, func() bool {
		var n int
		_ = pg.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE source = 'rabbit'`).Scan(&n)
		return n == 2 && admin.Count(queue) == 0
	}, "the source did not store and settle the deliveries")
	stop()
	<-done
	var n int
	if err := pg.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE idempotency_key IN ('m-1', 'r-2')`).Scan(&n); err != nil || n != 2 {
		t.Errorf("rows m-1 and r-2: %d (%v)", n, err)
	}
}
