package amqp_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/destination/amqp"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
)

// stallConn is a TCP connection whose reads or writes a test can hold, as
// a broker that blocks its publishers (a memory or disk alarm) or
// withholds confirms would. Close releases whatever it holds.
type stallConn struct {
	net.Conn
	mu       sync.Mutex
	stallR   bool
	stallW   bool
	released chan struct{} // closed by release or Close
	closed   atomic.Bool
}

func newStallConn(c net.Conn) *stallConn {
	return &stallConn{Conn: c, released: make(chan struct{})}
}

func (c *stallConn) hold(reads, writes bool) {
	c.mu.Lock()
	c.stallR, c.stallW = reads, writes
	c.released = make(chan struct{})
	c.mu.Unlock()
}

func (c *stallConn) release() {
	c.mu.Lock()
	c.stallR, c.stallW = false, false
	close(c.released)
	c.mu.Unlock()
}

func (c *stallConn) wait(reads bool) error {
	c.mu.Lock()
	held := (reads && c.stallR) || (!reads && c.stallW)
	ch := c.released
	c.mu.Unlock()
	if held {
		<-ch
	}
	if c.closed.Load() {
		return net.ErrClosed
	}
	return nil
}

// Read holds what it read while reads are held, so that a read already
// under way when the hold began cannot bring a confirm through.
func (c *stallConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if werr := c.wait(true); werr != nil {
		return 0, werr
	}
	return n, err
}

func (c *stallConn) Write(p []byte) (int, error) {
	if err := c.wait(false); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

func (c *stallConn) Close() error {
	if !c.closed.Swap(true) {
		c.mu.Lock()
		select {
		case <-c.released:
		default:
			close(c.released)
		}
		c.mu.Unlock()
	}
	return c.Conn.Close()
}

// stalling is a destination whose connections are stallConns, publishing
// to a fresh topic exchange with one queue bound to every key; one message
// has gone through it already (the connection is open).
type stalling struct {
	d     *amqp.Destination
	adm   *testenv.AMQPAdmin
	queue string
	ctx   context.Context

	mu    sync.Mutex
	conns []*stallConn
}

func newStalling(t *testing.T, name string) *stalling {
	t.Helper()
	url := testenv.AMQPURL(t)
	s := &stalling{adm: testenv.NewAMQPAdmin(t, url), ctx: testenv.Context(t, 30*time.Second)}
	ex := testenv.AMQPName(t, name)
	s.adm.Exchange(ex, "topic")
	s.queue = s.adm.Queue("q", ex, "#")
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		sc := newStallConn(c)
		s.mu.Lock()
		s.conns = append(s.conns, sc)
		s.mu.Unlock()
		return sc, nil
	}
	d, err := amqp.NewWithDial(s.ctx, amqp.Options{Name: name, URL: url, Exchange: ex, ConfirmTimeout: 300 * time.Millisecond}, nil, dial)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	s.d = d
	if err := d.Publish(s.ctx, []outbox.Message{msg(0, "t", "")}); err != nil {
		t.Fatalf("first Publish: %v", err)
	}
	return s
}

// last is the newest connection.
func (s *stalling) last() *stallConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns[len(s.conns)-1]
}

// A broker that withholds confirms: the batch fails as unavailable once
// ConfirmTimeout has passed, though ctx has not ended, and the destination
// publishes again once the broker answers.
func TestWithheldConfirmsEndAtConfirmTimeout(t *testing.T) {
	t.Parallel()
	s := newStalling(t, "withheld")
	d, ctx := s.d, s.ctx
	conn := s.last()
	conn.hold(true, false) // the publishes go out, no confirm comes back
	batch := []outbox.Message{msg(1, "t", ""), msg(2, "t", ""), msg(3, "t", "")}
	start := time.Now()
	failed := failures(t, d.Publish(ctx, batch), len(batch))
	t.Logf("Publish while confirms are withheld returned after %v: %d of %d failed", time.Since(start), failed, len(batch))
	if failed != len(batch) {
		t.Fatalf("%d of %d messages failed while the broker withheld confirms, want all", failed, len(batch))
	}
	if ctx.Err() != nil {
		t.Fatal("the test's context ended: the Publish was not bounded by ConfirmTimeout")
	}
	conn.release()
	testenv.Eventually(t, 10*time.Second, func() bool {
		return d.Publish(ctx, []outbox.Message{msg(4, "t", "")}) == nil
	}, "no Publish succeeded once the broker answered again")
	// The withheld messages may have reached the queue (they were written);
	// the engine retries them with the same ids, which consumers dedupe.
	if got := s.adm.Count(s.queue); got < 2 {
		t.Errorf("queue holds %d messages, want at least the first and the last", got)
	}
}

// failures checks that every failure of a Publish is the unavailable
// "no publisher confirm within" error, and returns how many messages failed.
func failures(t *testing.T, err error, n int) int {
	t.Helper()
	if err == nil {
		return 0
	}
	errs := []error{}
	var be *destination.BatchError
	if errors.As(err, &be) {
		errs = be.Errs
	} else {
		for range n {
			errs = append(errs, err) // the whole batch failed alike
		}
	}
	failed := 0
	for _, e := range errs {
		if e == nil {
			continue
		}
		failed++
		if !outbox.IsUnavailable(e) || !strings.Contains(e.Error(), "no publisher confirm within 300ms") {
			t.Errorf("failure %v, want unavailable: no publisher confirm within 300ms", e)
		}
	}
	return failed
}

// A broker that blocks its publishers (TCP backpressure during a memory or
// disk alarm): the write never returns and amqp091 does not watch ctx
// during it. ConfirmTimeout closes the socket, the batch fails as
// unavailable, and the next Publish dials again.
func TestBlockedWriteEndsAtConfirmTimeout(t *testing.T) {
	t.Parallel()
	s := newStalling(t, "blocked")
	d, ctx := s.d, s.ctx
	first := s.last()
	first.hold(false, true)
	batch := []outbox.Message{msg(1, "t", ""), msg(2, "t", "")}
	if failed := failures(t, d.Publish(ctx, batch), len(batch)); failed != len(batch) {
		t.Fatalf("%d of %d messages failed on a blocked connection, want all", failed, len(batch))
	}
	if !first.closed.Load() {
		t.Error("the blocked connection's socket was not closed")
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		return d.Publish(ctx, []outbox.Message{msg(3, "t", "")}) == nil
	}, "no Publish succeeded after the blocked connection was closed")
	if s.last() == first {
		t.Error("the destination did not dial again")
	}
}

// Many nacks in one batch wait for the channel's close reason once, not
// once per message (250 ms each: a full queue made a batch of 1,000 take
// minutes).
func TestManyNacksWaitForTheCloseReasonOnce(t *testing.T) {
	t.Parallel()
	d, _, _ := fullQueueDest(t)
	var waits atomic.Int32
	amqp.SetWaitClose(d, func(dead <-chan struct{}) {
		waits.Add(1)
		select {
		case <-dead:
		case <-time.After(10 * time.Millisecond):
		}
	})
	msgs := make([]outbox.Message, 20)
	for i := range msgs {
		msgs[i] = msg(i, "t", "")
	}
	err := d.Publish(testenv.Context(t, 20*time.Second), msgs)
	var be *destination.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("Publish = %v, want a *BatchError", err)
	}
	nacked := 0
	for _, e := range be.Errs {
		if e != nil {
			if !outbox.IsRetryable(e) || outbox.IsUnavailable(e) {
				t.Errorf("nacked message: %v, want retryable and not unavailable", e)
			}
			nacked++
		}
	}
	if nacked != 19 {
		t.Errorf("%d messages nacked, want 19", nacked)
	}
	if n := waits.Load(); n != 1 {
		t.Errorf("waited for the close reason %d times in one batch, want 1", n)
	}
}

// TestRowHeadersCannotReplaceTheRelays: a row header named like x-topic,
// x-attempt or x-message-key (any case) is dropped, as on NATS and HTTP:
// x-attempt is 0 on the first delivery, whatever the row says.
func TestRowHeadersCannotReplaceTheRelays(t *testing.T) {
	m := outbox.Message{ID: "5f0c6f0e-8a53-4d47-9a4e-2a7f6a3e9b11", Topic: "a.b", Key: "k", Attempt: 0,
		Headers: map[string]string{"X-Attempt": "7", "x-topic": "spoofed", "X-MESSAGE-KEY": "other", "tenant": "acme"}}
	h := amqp.Properties(&m).Headers
	if h[amqp.HeaderAttempt] != int64(0) || h[amqp.HeaderTopic] != "a.b" || h[amqp.HeaderMessageKey] != "k" || h["tenant"] != "acme" {
		t.Errorf("headers %v", h)
	}
	if len(h) != 4 {
		t.Errorf("headers %v, want x-topic, x-attempt, x-message-key and tenant only", h)
	}
}

// TestRowHeaderPolicy: RabbitMQ's reserved x- headers and the
// distribution headers CC and BCC are dropped from row headers and
// reported, unless allowHeaders names them; queuebox's own never pass.
func TestRowHeaderPolicy(t *testing.T) {
	var dropped []string
	d, err := amqp.New(context.Background(), amqp.Options{URL: "amqp://guest:guest@" + testenv.ClosedPort(t) + "/", Exchange: "x",
		DialTimeout: 200 * time.Millisecond, AllowHeaders: []string{"X-DELAY", "x-attempt"},
		OnDroppedHeader: func(name string) { dropped = append(dropped, name) }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	m := outbox.Message{ID: "5f0c6f0e-8a53-4d47-9a4e-2a7f6a3e9b11", Topic: "a.b", Headers: map[string]string{
		"x-delay": "60000", "x-death": "[]", "x-deduplication-header": "k", "x-match": "any", "CC": "other-queue", "bcc": "q",
		"x-attempt": "9", "X-Trace": "trace-1", "tenant": "acme"}}
	h := amqp.PropertiesOf(d, &m).Headers
	want := map[string]any{"x-topic": "a.b", "x-attempt": int64(0), "x-delay": "60000", "X-Trace": "trace-1", "tenant": "acme"}
	if len(h) != len(want) {
		t.Errorf("headers %v, want %v", h, want)
	}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("header %s = %v, want %v", k, h[k], v)
		}
	}
	slices.Sort(dropped)
	if !slices.Equal(dropped, []string{"CC", "bcc", "x-attempt", "x-death", "x-deduplication-header", "x-match"}) {
		t.Errorf("dropped %v", dropped)
	}
}

// TestAddressValues: a value rendered into the exchange or routing key,
// other than the topic, is one word unless routingKeyTokens: allow; the
// wildcard words and empty words are refused either way.
func TestAddressValues(t *testing.T) {
	for _, tt := range []struct {
		span      bool
		key, want string
	}{
		{false, "customer-42", "orders.customer-42"},
		{false, "eu.west", ""},
		{false, "#", ""},
		{false, "a*", ""},
		{true, "eu.west", "orders.eu.west"},
		{true, "eu.#", ""},
		{true, "eu..west", ""},
	} {
		d, err := amqp.New(context.Background(), amqp.Options{URL: "amqp://guest:guest@" + testenv.ClosedPort(t) + "/", Exchange: "ex",
			RoutingKey: "{{ topic }}.{{ key }}", RoutingKeyTokens: tt.span, DialTimeout: 200 * time.Millisecond}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, key, err := amqp.Address(d, &outbox.Message{ID: "id", Topic: "orders", Key: tt.key})
		switch {
		case tt.want != "" && (err != nil || key != tt.want):
			t.Errorf("key %q (span %v): %q, %v; want %q", tt.key, tt.span, key, err, tt.want)
		case tt.want == "" && !outbox.IsPermanent(err):
			t.Errorf("key %q (span %v): %q, %v; want a permanent refusal", tt.key, tt.span, key, err)
		}
		_ = d.Close()
	}
}
