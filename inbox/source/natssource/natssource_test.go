package natssource_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/inbox/intake"
	"github.com/queuebox/queuebox/inbox/source"
	"github.com/queuebox/queuebox/inbox/source/natssource"
	"github.com/queuebox/queuebox/internal/testenv"
)

// TestJetStreamSource publishes to a stream with a real client: a message
// published twice with one Nats-Msg-Id (a second time past the stream's
// duplicate window), one without an id (named by its stream sequence), and
// one whose body is not JSON. The first two are stored once each and
// acknowledged, the third is terminated; nothing is left pending.
func TestJetStreamSource(t *testing.T) {
	url := testenv.NATSURL(t)
	pg := testenv.InboxPostgres(t)
	subject := testenv.UniqueName("inbox.") + ".orders"
	js, stream := testenv.NATSStreamConfig(t, url, jetstream.StreamConfig{Subjects: []string{subject}, Duplicates: 100 * time.Millisecond})
	ctx := testenv.Context(t, time.Minute)
	table, err := inbox.NewTable(pg.Pool, inbox.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	order, _ := intake.NewField("", "customer")
	sink := &source.Sink{Store: table, Rules: intake.Rules{Source: "js", OrderKey: order, Headers: intake.NewHeaderPolicy()}}
	publish := func(id, body string) {
		m := nats.NewMsg(subject)
		m.Data = []byte(body)
		if id != "" {
			m.Header.Set("Nats-Msg-Id", id)
		}
		m.Header.Set("X-Request-Id", "r-"+id)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	publish("m-1", `{"customer":"c-1","n":1}`)
	time.Sleep(150 * time.Millisecond) // past the duplicate window: the stream stores it again
	publish("m-1", `{"customer":"c-1","n":1}`)
	publish("", `{"customer":"c-2","n":2}`)
	publish("m-3", `not json`)
	src, err := natssource.New(ctx, sink, natssource.Options{Servers: []string{url}, Stream: stream.CachedInfo().Config.Name, Consumer: "inbox", Headers: sink.Rules.Headers})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = src.Run(rctx) }()
	defer func() { stop(); <-done }()
	cons, err := js.Consumer(ctx, stream.CachedInfo().Config.Name, "inbox")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.AckFloor.Stream == 4
	}, "the source did not settle the 4 messages")
	var n int
	if err := pg.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE source = 'js'`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d rows (%v), want 2", n, err)
	}
	var key, topic string
	if err := pg.Pool.QueryRow(ctx, `SELECT key, topic FROM inbox WHERE idempotency_key = 'm-1'`).Scan(&key, &topic); err != nil || key != "c-1" || topic != subject {
		t.Errorf("m-1: key %q topic %q (%v)", key, topic, err)
	}
	var id string
	if err := pg.Pool.QueryRow(ctx, `SELECT idempotency_key FROM inbox WHERE key = 'c-2'`).Scan(&id); err != nil || id != stream.CachedInfo().Config.Name+":3" {
		t.Errorf("message without an id stored as %q (%v), want the stream name and sequence", id, err)
	}
	if err := pg.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n); err != nil || n != 2 {
		t.Errorf("%d outbox rows, want 2 (push)", n)
	}
}
