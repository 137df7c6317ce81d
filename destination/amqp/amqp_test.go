package amqp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/destination/amqp"
	"github.com/queuebox/queuebox/destination/destinationtest"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
)

func newDest(t *testing.T, opts amqp.Options) *amqp.Destination {
	t.Helper()
	if opts.Name == "" {
		opts.Name = "test"
	}
	d, err := amqp.New(testenv.Context(t, 10*time.Second), opts, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func msg(i int, topic, key string) outbox.Message {
	return outbox.Message{
		ID:      destinationtest.NewID(),
		Topic:   topic,
		Key:     key,
		Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)),
		Headers: map[string]string{},
	}
}

func TestPublishConfirmedAndConsumed(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	adm := testenv.NewAMQPAdmin(t, url)
	ex := testenv.AMQPName(t, "ex")
	adm.Exchange(ex, "topic")
	q := adm.Queue("q", ex, "billing.#")
	d := newDest(t, amqp.Options{URL: url, Exchange: ex})
	ctx := testenv.Context(t, 20*time.Second)

	msgs := make([]outbox.Message, 50)
	for i := range msgs {
		key := ""
		if i%2 == 0 {
			key = fmt.Sprintf("k%d", i%5)
		}
		msgs[i] = msg(i, "billing.invoice", key)
		msgs[i].Attempt = i % 3
		msgs[i].Headers["tenant"] = "acme"
	}
	if err := d.Publish(ctx, msgs); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	got := adm.Consume(q, len(msgs), 10*time.Second)
	if len(got) != len(msgs) {
		t.Fatalf("consumed %d messages, want %d", len(got), len(msgs))
	}
	for i, dl := range got {
		m := msgs[i] // one channel, one queue: FIFO
		if dl.MessageId != m.ID {
			t.Fatalf("delivery %d: message_id %q, want %q", i, dl.MessageId, m.ID)
		}
		if dl.DeliveryMode != amqp091.Persistent || dl.ContentType != "application/json" {
			t.Errorf("delivery %d: mode %d content type %q", i, dl.DeliveryMode, dl.ContentType)
		}
		if !bytes.Equal(dl.Body, m.Payload) || dl.RoutingKey != m.Topic || dl.Exchange != ex {
			t.Errorf("delivery %d: body %q at %s/%s", i, dl.Body, dl.Exchange, dl.RoutingKey)
		}
		if dl.Headers["x-topic"] != m.Topic || dl.Headers["x-attempt"] != int64(m.Attempt) || dl.Headers["tenant"] != "acme" {
			t.Errorf("delivery %d: headers %v", i, dl.Headers)
		}
		k, ok := dl.Headers["x-message-key"]
		if (m.Key == "") == ok || (ok && k != m.Key) {
			t.Errorf("delivery %d: x-message-key %v (present %v), want %q", i, k, ok, m.Key)
		}
	}
}

func TestUnroutableIsRetryableNotSent(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	adm := testenv.NewAMQPAdmin(t, url)
	ex := testenv.AMQPName(t, "ex")
	adm.Exchange(ex, "topic")
	q := adm.Queue("q", ex, "a.#")
	d := newDest(t, amqp.Options{URL: url, Exchange: ex})
	ctx := testenv.Context(t, 20*time.Second)

	batch := []outbox.Message{msg(0, "a.x", "k"), msg(1, "b.x", "k2"), msg(2, "a.y", "")}
	err := d.Publish(ctx, batch)
	var be *destination.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("Publish = %v, want a *BatchError", err)
	}
	if be.Errs[0] != nil || be.Errs[2] != nil {
		t.Errorf("routable messages failed: %v", be.Errs)
	}
	e := be.Errs[1]
	want := fmt.Sprintf("unroutable: exchange %q routing key %q has no bound queue", ex, "b.x")
	if e == nil || !outbox.IsRetryable(e) || outbox.IsUnavailable(e) || !strings.Contains(e.Error(), want) {
		t.Errorf("unroutable message: %v, want a retryable error containing %s", e, want)
	}
	if got := adm.Consume(q, 2, 5*time.Second); len(got) != 2 {
		t.Errorf("consumed %d, want 2", len(got))
	}
	// The channel is still good for the next batch.
	if err := d.Publish(ctx, []outbox.Message{msg(3, "a.z", "")}); err != nil {
		t.Errorf("Publish after a return: %v", err)
	}
}

// fullQueueDest is a destination whose every message goes to a queue that
// holds one message and rejects further publishes: the broker nacks them.
func fullQueueDest(t *testing.T) (*amqp.Destination, *testenv.AMQPAdmin, string) {
	t.Helper()
	url := testenv.AMQPURL(t)
	adm := testenv.NewAMQPAdmin(t, url)
	ex := testenv.AMQPName(t, "ex")
	adm.Exchange(ex, "direct")
	q := adm.QueueArgs("q", ex, "full", amqp091.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	return newDest(t, amqp.Options{URL: url, Exchange: ex, RoutingKey: "full"}), adm, q
}

func TestExchangeMissingThenDeclared(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	adm := testenv.NewAMQPAdmin(t, url)
	ex := testenv.AMQPName(t, "late")
	d := newDest(t, amqp.Options{URL: url, Exchange: ex})
	ctx := testenv.Context(t, 20*time.Second)

	err := d.Publish(ctx, []outbox.Message{msg(0, "t.a", ""), msg(1, "t.b", "")})
	if err == nil {
		t.Fatal("Publish to a missing exchange succeeded")
	}
	for i := range 2 {
		e := destination.ErrorAt(err, i)
		if e == nil || outbox.IsPermanent(e) || !strings.Contains(e.Error(), "does not exist") {
			t.Errorf("message %d: %v, want a retryable error saying the exchange does not exist", i, e)
		}
	}
	if err := d.Check(ctx); err == nil {
		t.Error("Check with a missing exchange succeeded")
	}
	adm.Exchange(ex, "topic")
	q := adm.Queue("q", ex, "#")
	if err := d.Publish(ctx, []outbox.Message{msg(2, "t.c", "")}); err != nil {
		t.Fatalf("Publish after the exchange was declared: %v", err)
	}
	if got := adm.Consume(q, 1, 5*time.Second); len(got) != 1 {
		t.Errorf("consumed %d, want 1", len(got))
	}
	if err := d.Check(ctx); err != nil {
		t.Errorf("Check: %v", err)
	}
}

func TestExchangeFromAggregateType(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	adm := testenv.NewAMQPAdmin(t, url)
	exA, exB, missing := testenv.AMQPName(t, "a"), testenv.AMQPName(t, "b"), testenv.AMQPName(t, "missing")
	adm.Exchange(exA, "topic")
	adm.Exchange(exB, "topic")
	qa, qb := adm.Queue("qa", exA, "#"), adm.Queue("qb", exB, "#")
	d := newDest(t, amqp.Options{URL: url, Exchange: "{{ aggregateType }}", RoutingKeyTokens: true}) // the test's exchange names hold dots
	ctx := testenv.Context(t, 20*time.Second)

	batch := []outbox.Message{msg(0, "x.1", ""), msg(1, "x.2", ""), msg(2, "x.3", ""), msg(3, "x.4", "")}
	batch[0].AggregateType, batch[1].AggregateType, batch[2].AggregateType, batch[3].AggregateType = exA, missing, exB, exA
	err := d.Publish(ctx, batch)
	var be *destination.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("Publish = %v, want a *BatchError", err)
	}
	if be.Errs[0] != nil || be.Errs[2] != nil || be.Errs[3] != nil {
		t.Errorf("messages to existing exchanges failed: %v", be.Errs)
	}
	if e := be.Errs[1]; e == nil || !outbox.IsRetryable(e) || !strings.Contains(e.Error(), missing) {
		t.Errorf("message to the missing exchange: %v", e)
	}
	if n := len(adm.Consume(qa, 2, 5*time.Second)) + len(adm.Consume(qb, 1, 5*time.Second)); n != 3 {
		t.Errorf("consumed %d, want 3", n)
	}
}

func TestDeclareExchange(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	adm := testenv.NewAMQPAdmin(t, url)
	prefix := testenv.AMQPName(t, "decl")
	exA, exB := prefix+".a", prefix+".b"
	adm.DeleteExchangeAtCleanup(exA)
	adm.DeleteExchangeAtCleanup(exB)
	d := newDest(t, amqp.Options{URL: url, Exchange: prefix + ".{{ aggregateType }}", DeclareExchange: true, ExchangeType: "fanout"})
	ctx := testenv.Context(t, 20*time.Second)

	first := []outbox.Message{msg(0, "t", ""), msg(1, "t", "")}
	first[0].AggregateType, first[1].AggregateType = "a", "b"
	// Declared, but nothing is bound yet: both come back unroutable.
	err := d.Publish(ctx, first)
	for i := range first {
		if e := destination.ErrorAt(err, i); e == nil || !strings.Contains(e.Error(), "unroutable") {
			t.Errorf("message %d before binding: %v, want unroutable", i, e)
		}
	}
	qa, qb := adm.Queue("qa", exA, ""), adm.Queue("qb", exB, "")
	if err := d.Publish(ctx, first); err != nil {
		t.Fatalf("Publish after binding: %v", err)
	}
	if n := len(adm.Consume(qa, 1, 5*time.Second)) + len(adm.Consume(qb, 1, 5*time.Second)); n != 2 {
		t.Errorf("consumed %d, want 2", n)
	}
}

func TestThroughput10k(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	adm := testenv.NewAMQPAdmin(t, url)
	ex := testenv.AMQPName(t, "bulk")
	adm.Exchange(ex, "topic")
	q := adm.Queue("q", ex, "#")
	d := newDest(t, amqp.Options{URL: url, Exchange: ex})
	ctx := testenv.Context(t, 60*time.Second)

	const total, batch = 10000, 100
	msgs := make([]outbox.Message, total)
	for i := range msgs {
		msgs[i] = msg(i, "bulk.row", fmt.Sprintf("k%d", i%100))
	}
	start := time.Now()
	for i := 0; i < total; i += batch {
		if err := d.Publish(ctx, msgs[i:i+batch]); err != nil {
			t.Fatalf("Publish batch at %d: %v", i, err)
		}
	}
	elapsed := time.Since(start)
	t.Logf("published and confirmed %d rows in batches of %d (one Publish at a time) in %v: %.0f rows/s",
		total, batch, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds())
	testenv.Eventually(t, 20*time.Second, func() bool { return adm.Count(q) == total }, "queue does not hold %d messages", total)
}

func TestConnectionDropRecovers(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	adm := testenv.NewAMQPAdmin(t, url)
	ex := testenv.AMQPName(t, "drop")
	adm.Exchange(ex, "topic")
	q := adm.Queue("q", ex, "#")

	var mu sync.Mutex
	var conns []net.Conn
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
		return c, err
	}
	ctx := testenv.Context(t, 30*time.Second)
	d, err := amqp.NewWithDial(ctx, amqp.Options{Name: "drop", URL: url, Exchange: ex}, nil, dial)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })

	sent := map[string]bool{}
	publish := func(m outbox.Message) error {
		err := d.Publish(ctx, []outbox.Message{m})
		if err == nil {
			sent[m.ID] = true
		}
		return err
	}
	if err := publish(msg(0, "t", "")); err != nil {
		t.Fatal(err)
	}
	// Cut the TCP connection under the destination, as a broker restart
	// or a network failure would.
	mu.Lock()
	for _, c := range conns {
		_ = c.Close()
	}
	mu.Unlock()
	err = publish(msg(1, "t", ""))
	if err != nil && !outbox.IsRetryable(err) {
		t.Fatalf("Publish right after the drop: %v, want success or a retryable error", err)
	}
	t.Logf("Publish right after the drop: %v", err)
	i := 2
	testenv.Eventually(t, 10*time.Second, func() bool {
		i++
		return publish(msg(i, "t", "")) == nil
	}, "no Publish succeeded after the connection dropped")
	mu.Lock()
	n := len(conns)
	mu.Unlock()
	if n < 2 {
		t.Errorf("dialled %d times, want a redial", n)
	}
	got := adm.Consume(q, len(sent), 10*time.Second)
	for _, dl := range got {
		delete(sent, dl.MessageId)
	}
	if len(sent) != 0 {
		t.Errorf("%d messages reported sent never arrived", len(sent))
	}
}

func TestBrokerUnreachableIsUnavailable(t *testing.T) {
	t.Parallel()
	url := "amqp://guest:topsecret@" + testenv.ClosedPort(t) + "/"
	var logs testenv.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := testenv.Context(t, 20*time.Second)
	d, err := amqp.New(ctx, amqp.Options{Name: "down", URL: url, Exchange: "x", DialTimeout: time.Second}, log)
	if err != nil {
		t.Fatalf("New with the broker down: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	err = d.Publish(ctx, []outbox.Message{msg(0, "t", ""), msg(1, "t", "")})
	if !outbox.IsUnavailable(err) {
		t.Errorf("Publish = %v, want Unavailable", err)
	}
	if err := d.Check(ctx); !outbox.IsUnavailable(err) {
		t.Errorf("Check = %v, want Unavailable", err)
	}
	if strings.Contains(logs.String(), "topsecret") || (err != nil && strings.Contains(err.Error(), "topsecret")) {
		t.Errorf("password leaked: %s / %v", logs.String(), err)
	}
}

func TestWrongPasswordNotLeaked(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	bad := strings.Replace(url, "guest:guest@", "guest:wr0ngpass@", 1)
	if bad == url {
		t.Skip("QUEUEBOX_TEST_AMQP_URL has no guest:guest credentials to spoil")
	}
	ctx := testenv.Context(t, 20*time.Second)
	d, err := amqp.New(ctx, amqp.Options{Name: "badpw", URL: bad, Exchange: "x", DialTimeout: 2 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	err = d.Publish(ctx, []outbox.Message{msg(0, "t", "")})
	if !outbox.IsUnavailable(err) || strings.Contains(err.Error(), "wr0ngpass") {
		t.Errorf("Publish with a wrong password = %v; want unavailable, without the password", err)
	}
	if s := d.String(); strings.Contains(s, "wr0ngpass") {
		t.Errorf("String() leaks the password: %s", s)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	ctx := context.Background()
	for name, o := range map[string]amqp.Options{
		"bad url":      {URL: "http://guest:hunter2@x:1:2/"},
		"bad exchange": {URL: "amqp://localhost/", Exchange: "{{ nope }}"},
		"bad key":      {URL: "amqp://localhost/", RoutingKey: "{{ topic"},
	} {
		_, err := amqp.New(ctx, o, nil)
		if err == nil {
			t.Errorf("%s: New succeeded", name)
		} else if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: error shows the password: %v", name, err)
		}
	}
}

func TestConformance(t *testing.T) {
	url := testenv.AMQPURL(t)
	destinationtest.Run(t, func(t *testing.T) destinationtest.Harness {
		adm := testenv.NewAMQPAdmin(t, url)
		ex := testenv.AMQPName(t, "conf")
		adm.Exchange(ex, "topic")
		q := adm.Queue("q", ex, "queuebox.#")
		d := newDest(t, amqp.Options{Name: "conf", URL: url, Exchange: ex})
		r := newReader(t, url, q)
		topic := "queuebox.orders.created"
		return destinationtest.Harness{
			Destination: d,
			Topic:       topic,
			Address:     ex + "/" + topic,
			Receive:     r.receive,
			Poison: func(m *outbox.Message, _ bool) {
				m.Topic = "unbound.topic" // no queue bound: returned, retryable
			},
			Missing: func(t *testing.T) destination.Destination {
				return newDest(t, amqp.Options{Name: "missing", URL: url, Exchange: ex + ".missing"})
			},
		}
	}, destinationtest.Features{
		KeyHeader:        true,
		KeyPreserved:     true,
		OrderedPerKey:    true,
		FailureInjection: true,
		MissingTarget:    true,
		ControlHeaders:   []string{"x-delay", "x-death", "x-match", "CC", "BCC", "X-ATTEMPT"},
	})
}

// reader consumes one queue for the conformance suite.
type reader struct {
	deliveries <-chan amqp091.Delivery
}

func newReader(t *testing.T, url, queue string) *reader {
	conn, err := amqp091.Dial(url)
	if err != nil {
		testenv.Unavailable(t, "RabbitMQ", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &reader{deliveries: ds}
}

func (r *reader) receive(ctx context.Context, n int) ([]destinationtest.Received, error) {
	var out []destinationtest.Received
	for len(out) < n {
		select {
		case dl, ok := <-r.deliveries:
			if !ok {
				return out, errors.New("consumer closed")
			}
			rec := destinationtest.Received{
				ID:      dl.MessageId,
				Address: dl.Exchange + "/" + dl.RoutingKey,
				Headers: map[string]string{"message_id": dl.MessageId, "content_type": dl.ContentType},
				Body:    dl.Body,
			}
			for k, v := range dl.Headers {
				rec.Headers[k] = fmt.Sprint(v)
			}
			if k, ok := dl.Headers["x-message-key"].(string); ok {
				rec.Key = k
			}
			out = append(out, rec)
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
	return out, nil
}

// TestRefusedMessageFailsAlone: messages the broker refuses with a channel
// error (here two bound for an internal exchange, which no client may
// publish to) fail alone; the other messages of the batch, which the
// closed channel failed with them, are published again and delivered;
// messages for a missing exchange fail with that.
// Before, every message not yet confirmed when the channel closed failed
// with the refused one's error, spent an attempt for it, and could die of
// it (found by a review's test).
func TestRefusedMessageFailsAlone(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	adm := testenv.NewAMQPAdmin(t, url)
	good := testenv.AMQPName(t, "good")
	adm.Exchange(good, "topic")
	q := adm.Queue("q", good, "#")
	bad := testenv.AMQPName(t, "internal")
	adm.InternalExchange(bad, "topic")

	d := newDest(t, amqp.Options{URL: url, Exchange: "{{ aggregateType }}", RoutingKeyTokens: true}) // the test's exchange names hold dots
	ctx := testenv.Context(t, 30*time.Second)
	// First a hundred messages for an exchange that does not exist: they
	// fail its check before anything is published, on their own, and are
	// not published again (a review found them using up the narrowing's
	// 64 passes, so that the good messages kept the refused one's error).
	var batch []outbox.Message
	missing := testenv.AMQPName(t, "missing")
	for i := range 100 {
		m := msg(100+i, "a.b", fmt.Sprintf("m%d", i))
		m.AggregateType = missing
		batch = append(batch, m)
	}
	refused := map[int]bool{103: true, 108: true}
	for i := 100; i < 112; i++ {
		m := msg(i, "a.b", fmt.Sprintf("k%d", i))
		m.AggregateType = good
		if refused[i] {
			m.AggregateType = bad
		}
		batch = append(batch, m)
	}
	err := d.Publish(ctx, batch)
	var be *destination.BatchError
	if !errors.As(err, &be) || len(be.Errs) != len(batch) {
		t.Fatalf("Publish = %v; want a BatchError for the refused messages", err)
	}
	want := map[string]bool{}
	for i, e := range be.Errs {
		switch {
		case i < 100:
			if e == nil || !strings.Contains(e.Error(), "does not exist") {
				t.Errorf("message %d (missing exchange): %v; want the exchange named missing", i, e)
			}
		case refused[i] && (e == nil || outbox.IsUnavailable(e) || !strings.Contains(e.Error(), "ACCESS_REFUSED")):
			t.Errorf("message %d (internal exchange): %v; want the broker's refusal, not unavailable", i, e)
		case !refused[i] && e != nil:
			t.Errorf("message %d (good exchange) failed: %v", i, e)
		case !refused[i]:
			want[batch[i].ID] = true
		}
	}
	got := map[string]bool{}
	for _, dl := range adm.Consume(q, 3*len(batch), 3*time.Second) {
		got[dl.MessageId] = true
	}
	for id := range want {
		if !got[id] {
			t.Errorf("message %s was reported published but never reached the queue", id)
		}
	}
}
