// Package destinationtest is the conformance suite every destination adapter
// must pass. An adapter's _test.go calls Run with a function that builds a
// fresh Harness (a Destination addressed at a fresh target, plus a way to read
// back what arrived) and Features flags that skip what the adapter cannot
// promise.
//
//	func TestConformance(t *testing.T) {
//		destinationtest.Run(t, func(t *testing.T) destinationtest.Harness {
//			// create a unique stream/topic/queue/server for t, clean it up with t.Cleanup
//			return destinationtest.Harness{Destination: d, Topic: "orders", Receive: recv}
//		}, destinationtest.Features{KeyHeader: true, OrderedPerKey: true})
//	}
//
// Subtests run in parallel; newHarness must be safe to call concurrently and
// every harness must own its target.
package destinationtest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/outbox"
)

// Received is one message as it arrived at the target, read back through the
// protocol itself.
type Received struct {
	// ID is the message identity as the protocol carries it: Nats-Msg-Id,
	// X-Message-Id, the AMQP message_id property.
	ID string
	// Address is where it arrived: subject, topic, URL path,
	// "exchange/routingKey".
	Address string
	// Key is the message key as the protocol carries it (the Kafka record
	// key, the X-Message-Key header); empty when none.
	Key string
	// Headers are all headers/properties that arrived. Names are compared
	// case-insensitively by the suite (HTTP canonicalises them, AMQP uses
	// lower case).
	Headers map[string]string
	// Body is the message body.
	Body []byte
}

// Harness is one fresh destination at one fresh target.
type Harness struct {
	// Destination publishes to the target. The suite closes it; the harness
	// may close it again at cleanup (Close is idempotent).
	Destination destination.Destination

	// Topic is the row topic the suite puts on its messages; the destination
	// must route it to the target Receive reads from. Empty: "queuebox.test".
	Topic string

	// Address, when non-empty, is the Received.Address every message of the
	// suite must arrive at.
	Address string

	// Receive waits until n more messages have arrived and returns them in
	// arrival order. When ctx ends first it returns what arrived, with
	// ctx.Err(). Each call returns messages not returned before.
	Receive func(ctx context.Context, n int) ([]Received, error)

	// Poison, when set (Features.FailureInjection), changes m so that
	// publishing it fails for that message only (a topic routed to a
	// subject no stream covers, a header the test server answers with 500,
	// ...). Permanent says which kind of failure to provoke; Publish must
	// report that kind.
	Poison func(m *outbox.Message, permanent bool)

	// Missing, when set (Features.MissingTarget), returns a destination
	// addressed at a target that does not exist. Publishing to it must fail
	// every message with a retryable error, without hanging.
	Missing func(t *testing.T) destination.Destination

	// Slow, when set (Features.SlowInjection), changes m so that the
	// target holds its answer to m until release is called (a receiver
	// that takes its time for one request). The suite calls release once;
	// the harness releases anything left at cleanup.
	Slow func(m *outbox.Message) (release func())
}

// Features says what an adapter promises beyond the baseline. The baseline
// (always tested): identity = row id, body = payload bytes, X-Topic and
// X-Attempt headers, row headers added without overriding identity, the
// row's traceparent and tracestate delivered as they are, a large
// batch accepted without loss, empty batch is a no-op, a cancelled ctx makes
// Publish fail without hanging, Close is idempotent and Publish after Close
// fails.
type Features struct {
	// KeyHeader: X-Message-Key is sent when the key is non-empty, and only
	// then.
	KeyHeader bool
	// KeyPreserved: Received.Key equals the row key (from the header or
	// the protocol's own key).
	KeyPreserved bool
	// OrderedPerKey: messages sharing a key arrive in batch order.
	OrderedPerKey bool
	// FailureInjection: Harness.Poison is set.
	FailureInjection bool
	// PermanentInjection: Harness.Poison can provoke permanent failures
	// (otherwise only retryable ones are tested).
	PermanentInjection bool
	// MissingTarget: Harness.Missing is set.
	MissingTarget bool
	// IdentityHeaders are header names that must carry the id besides
	// Received.ID (HTTP: X-Message-Id, Idempotency-Key). A row header of
	// the same name must not override them.
	IdentityHeaders []string
	// Streamer: the Destination implements destination.Streamer. Its done
	// is called exactly once per message, with the outcome Publish would
	// report, and PublishEach returns after the last call.
	Streamer bool
	// SlowInjection: Harness.Slow is set, and a message whose answer is
	// held does not delay the done calls of the others (Streamer).
	SlowInjection bool
	// ControlHeaders are row header names the adapter must not deliver
	// (its protocol's control headers, which would steer the broker or
	// the request): a row carrying them, each with the value "control",
	// is delivered without them.
	ControlHeaders []string
	// BatchSize of the no-loss test; 0 means 500.
	BatchSize int
	// Timeout bounds each wait for messages; 0 means 20s.
	Timeout time.Duration
}

// identityNames are the identity headers of every protocol; the suite puts
// them in row headers to prove that none overrides the identity.
var identityNames = []string{"Nats-Msg-Id", "X-Message-Id", "Idempotency-Key", "message_id", "Message-Id"}

// Run runs the conformance suite. newHarness is called once per subtest.
func Run(t *testing.T, newHarness func(t *testing.T) Harness, f Features) {
	if f.BatchSize <= 0 {
		f.BatchSize = 500
	}
	if f.Timeout <= 0 {
		f.Timeout = 20 * time.Second
	}
	s := &suite{newHarness: newHarness, f: f}
	tests := []struct {
		name string
		fn   func(t *testing.T)
		skip string
	}{
		{"IdentityAndBody", s.identityAndBody, ""},
		{"Headers", s.headers, ""},
		{"RowHeadersCannotOverrideIdentity", s.rowHeadersCannotOverrideIdentity, ""},
		{"TraceContextPassesThrough", s.traceContext, ""},
		{"RowControlHeadersDropped", s.rowControlHeadersDropped, skipUnless(len(f.ControlHeaders) > 0, "ControlHeaders")},
		{"LargeBatchNoLoss", s.largeBatch, ""},
		{"OrderWithinKey", s.orderWithinKey, skipUnless(f.OrderedPerKey, "OrderedPerKey")},
		{"CancelledContext", s.cancelledContext, ""},
		{"EmptyBatch", s.emptyBatch, ""},
		{"PerMessageFailure", s.perMessageFailure, skipUnless(f.FailureInjection, "FailureInjection")},
		{"MissingTarget", s.missingTarget, skipUnless(f.MissingTarget, "MissingTarget")},
		{"CloseIdempotent", s.closeIdempotent, ""},
		{"StreamerEachOnce", s.streamerEachOnce, skipUnless(f.Streamer, "Streamer")},
		{"StreamerCancelledContext", s.streamerCancelledContext, skipUnless(f.Streamer, "Streamer")},
		{"StreamerSlowMessageHoldsOnlyItself", s.streamerSlowMessage, skipUnless(f.Streamer && f.SlowInjection, "Streamer and SlowInjection")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.skip != "" {
				t.Skip(tc.skip)
			}
			t.Parallel()
			tc.fn(t)
		})
	}
}

func skipUnless(ok bool, feature string) string {
	if ok {
		return ""
	}
	return "adapter does not claim Features." + feature
}

type suite struct {
	newHarness func(t *testing.T) Harness
	f          Features
}

func (s *suite) harness(t *testing.T) Harness {
	t.Helper()
	h := s.newHarness(t)
	if h.Destination == nil {
		t.Fatal("harness has no Destination")
	}
	if h.Receive == nil {
		t.Fatal("harness has no Receive")
	}
	if h.Topic == "" {
		h.Topic = "queuebox.test"
	}
	t.Cleanup(func() { _ = h.Destination.Close() })
	return h
}

func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), s.f.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// NewID returns a random UUID (version 4) in its canonical text form.
func NewID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func (s *suite) message(h Harness, i int) outbox.Message {
	id := NewID()
	return outbox.Message{
		ID:            id,
		Topic:         h.Topic,
		Payload:       fmt.Appendf(nil, `{"n":%d,"id":%q}`, i, id),
		Headers:       map[string]string{},
		AggregateType: "test",
		MaxAttempts:   5,
		Sequence:      int64(i + 1),
		CreatedAt:     time.Now(),
		ScheduledAt:   time.Now(),
	}
}

// Header returns the value of header name in r, compared case-insensitively.
func (r Received) Header(name string) (string, bool) {
	if v, ok := r.Headers[name]; ok {
		return v, true
	}
	for k, v := range r.Headers {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}

// publish calls Publish and fails t on any error.
func (s *suite) publish(t *testing.T, h Harness, msgs []outbox.Message) {
	t.Helper()
	if err := h.Destination.Publish(s.ctx(t), msgs); err != nil {
		t.Fatalf("Publish(%d messages): %v", len(msgs), err)
	}
}

// collect reads until every message of msgs has arrived at least once and
// returns, per id, the first arrival, and the ids in order of first arrival.
func (s *suite) collect(t *testing.T, h Harness, msgs []outbox.Message) (map[string]Received, []string) {
	t.Helper()
	ctx := s.ctx(t)
	want := make(map[string]bool, len(msgs))
	for _, m := range msgs {
		want[m.ID] = true
	}
	got := make(map[string]Received, len(msgs))
	var order []string
	for len(got) < len(want) {
		rs, err := h.Receive(ctx, len(want)-len(got))
		for _, r := range rs {
			if !want[r.ID] {
				t.Errorf("received a message with unexpected id %q (body %q)", r.ID, r.Body)
				continue
			}
			if _, dup := got[r.ID]; !dup {
				got[r.ID] = r
				order = append(order, r.ID)
			}
		}
		if err != nil && len(got) < len(want) {
			var missing []string
			for _, m := range msgs {
				if _, ok := got[m.ID]; !ok {
					missing = append(missing, m.ID)
				}
			}
			t.Fatalf("Receive: %v; %d of %d messages never arrived (first: %s)", err, len(missing), len(msgs), missing[0])
		}
	}
	return got, order
}

func (s *suite) checkAddress(t *testing.T, h Harness, r Received) {
	t.Helper()
	if h.Address != "" && r.Address != h.Address {
		t.Errorf("message %s arrived at %q, want %q", r.ID, r.Address, h.Address)
	}
}

func (s *suite) identityAndBody(t *testing.T) {
	h := s.harness(t)
	msgs := make([]outbox.Message, 10)
	for i := range msgs {
		msgs[i] = s.message(h, i)
	}
	msgs[3].Payload = []byte(`{"unicode":"h\u00e9llo \u2713","nested":{"a":[1,2,3]},"s":"line\nbreak"}`)
	s.publish(t, h, msgs)
	got, _ := s.collect(t, h, msgs)
	for _, m := range msgs {
		r := got[m.ID]
		if string(r.Body) != string(m.Payload) {
			t.Errorf("message %s: body %q, want payload bytes %q", m.ID, r.Body, m.Payload)
		}
		for _, name := range s.f.IdentityHeaders {
			if v, _ := r.Header(name); v != m.ID {
				t.Errorf("message %s: identity header %s = %q, want the id", m.ID, name, v)
			}
		}
		s.checkAddress(t, h, r)
	}
}

func (s *suite) headers(t *testing.T) {
	h := s.harness(t)
	keyed := s.message(h, 0)
	keyed.Key = "customer-42"
	keyed.Headers = map[string]string{"X-Trace": "trace-1", "tenant": "acme"}
	unkeyed := s.message(h, 1)
	unkeyed.Headers = map[string]string{"X-Trace": "trace-2"}
	retried := s.message(h, 2)
	retried.Attempt = 3
	retried.Key = "customer-7"
	msgs := []outbox.Message{keyed, unkeyed, retried}
	s.publish(t, h, msgs)
	got, _ := s.collect(t, h, msgs)

	for _, m := range msgs {
		r := got[m.ID]
		if v, ok := r.Header("X-Topic"); !ok || v != m.Topic {
			t.Errorf("message %s: X-Topic = %q (present %v), want %q", m.ID, v, ok, m.Topic)
		}
		if v, ok := r.Header("X-Attempt"); !ok || v != strconv.Itoa(m.Attempt) {
			t.Errorf("message %s: X-Attempt = %q (present %v), want %q", m.ID, v, ok, strconv.Itoa(m.Attempt))
		}
		if s.f.KeyHeader {
			v, ok := r.Header("X-Message-Key")
			switch {
			case m.Key == "" && ok:
				t.Errorf("message %s has no key but X-Message-Key = %q was sent", m.ID, v)
			case m.Key != "" && v != m.Key:
				t.Errorf("message %s: X-Message-Key = %q (present %v), want %q", m.ID, v, ok, m.Key)
			}
		}
		if s.f.KeyPreserved && r.Key != m.Key {
			t.Errorf("message %s: key %q, want %q", m.ID, r.Key, m.Key)
		}
		for k, want := range m.Headers {
			if v, ok := r.Header(k); !ok || v != want {
				t.Errorf("message %s: row header %s = %q (present %v), want %q", m.ID, k, v, ok, want)
			}
		}
	}
	if v, ok := got[retried.ID].Header("X-Trace"); ok {
		t.Errorf("message %s has no row headers but got X-Trace = %q from another message", retried.ID, v)
	}
}

func (s *suite) rowHeadersCannotOverrideIdentity(t *testing.T) {
	h := s.harness(t)
	msgs := make([]outbox.Message, 3)
	for i := range msgs {
		msgs[i] = s.message(h, i)
		for _, name := range append(append([]string{}, identityNames...), s.f.IdentityHeaders...) {
			msgs[i].Headers[name] = "forged-id"
			msgs[i].Headers[strings.ToLower(name)] = "forged-id"
		}
	}
	s.publish(t, h, msgs)
	got, _ := s.collect(t, h, msgs)
	for _, m := range msgs {
		r := got[m.ID]
		if r.ID != m.ID {
			t.Errorf("identity overridden by a row header: got %q, want %q", r.ID, m.ID)
		}
		for _, name := range s.f.IdentityHeaders {
			if v, _ := r.Header(name); v != m.ID {
				t.Errorf("message %s: identity header %s = %q, want the id (row header must not override it)", m.ID, name, v)
			}
		}
	}
}

// traceContext: a row's W3C trace context (traceparent, tracestate) reaches
// the receiver as it is, so that a consumer continues the producer's trace.
func (s *suite) traceContext(t *testing.T) {
	h := s.harness(t)
	m := s.message(h, 0)
	m.Headers["traceparent"] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	m.Headers["tracestate"] = "vendor=opaque,other=1"
	s.publish(t, h, []outbox.Message{m})
	got, _ := s.collect(t, h, []outbox.Message{m})
	for _, name := range []string{"traceparent", "tracestate"} {
		if v, _ := got[m.ID].Header(name); v != m.Headers[name] {
			t.Errorf("message %s: %s = %q, want the row's %q", m.ID, name, v, m.Headers[name])
		}
	}
}

func (s *suite) rowControlHeadersDropped(t *testing.T) {
	h := s.harness(t)
	msgs := make([]outbox.Message, 3)
	for i := range msgs {
		msgs[i] = s.message(h, i)
		msgs[i].Headers["X-Trace"] = "trace-" + strconv.Itoa(i)
		for _, name := range s.f.ControlHeaders {
			msgs[i].Headers[name] = "control"
		}
	}
	s.publish(t, h, msgs)
	got, _ := s.collect(t, h, msgs)
	for _, m := range msgs {
		r := got[m.ID]
		for _, name := range s.f.ControlHeaders {
			if v, ok := r.Header(name); ok && v == "control" {
				t.Errorf("message %s: control header %s arrived from the row", m.ID, name)
			}
		}
		if v, _ := r.Header("X-Trace"); v != m.Headers["X-Trace"] {
			t.Errorf("message %s: X-Trace = %q, want %q", m.ID, v, m.Headers["X-Trace"])
		}
	}
}

func (s *suite) largeBatch(t *testing.T) {
	h := s.harness(t)
	msgs := make([]outbox.Message, s.f.BatchSize)
	for i := range msgs {
		msgs[i] = s.message(h, i)
		if i%3 != 0 {
			msgs[i].Key = fmt.Sprintf("k%d", i%17)
		}
	}
	s.publish(t, h, msgs)
	got, _ := s.collect(t, h, msgs)
	for _, m := range msgs {
		if r := got[m.ID]; string(r.Body) != string(m.Payload) {
			t.Fatalf("message %s: body %q, want %q", m.ID, r.Body, m.Payload)
		}
	}
}

func (s *suite) orderWithinKey(t *testing.T) {
	h := s.harness(t)
	keys := []string{"a", "b", "c", "d"}
	msgs := make([]outbox.Message, 120)
	for i := range msgs {
		msgs[i] = s.message(h, i)
		msgs[i].Key = keys[i%len(keys)]
	}
	s.publish(t, h, msgs)
	_, order := s.collect(t, h, msgs)
	pos := make(map[string]int, len(order))
	for i, id := range order {
		pos[id] = i
	}
	last := map[string]int{}
	lastID := map[string]string{}
	for _, m := range msgs {
		p := pos[m.ID]
		if prev, ok := last[m.Key]; ok && p < prev {
			t.Errorf("key %q: message %s (seq %d) arrived before %s, which precedes it in the batch", m.Key, m.ID, m.Sequence, lastID[m.Key])
		}
		last[m.Key], lastID[m.Key] = p, m.ID
	}
}

func (s *suite) cancelledContext(t *testing.T) {
	h := s.harness(t)
	msgs := make([]outbox.Message, 20)
	for i := range msgs {
		msgs[i] = s.message(h, i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() { done <- h.Destination.Publish(ctx, msgs) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Publish with a cancelled context returned nil")
		}
		for i := range msgs {
			e := destination.ErrorAt(err, i)
			if e == nil {
				t.Errorf("message %d reported as accepted although ctx was cancelled before Publish", i)
				continue
			}
			if outbox.IsPermanent(e) {
				t.Errorf("message %d: a cancelled context must not be a permanent failure: %v", i, e)
			}
		}
	case <-time.After(s.f.Timeout):
		t.Fatalf("Publish with a cancelled context did not return within %v", s.f.Timeout)
	}

	// The destination stays usable.
	m := s.message(h, 99)
	s.publish(t, h, []outbox.Message{m})
	s.collect(t, h, []outbox.Message{m})
}

func (s *suite) emptyBatch(t *testing.T) {
	h := s.harness(t)
	if err := h.Destination.Publish(s.ctx(t), nil); err != nil {
		t.Fatalf("Publish(nil) = %v, want nil", err)
	}
	if err := h.Destination.Publish(s.ctx(t), []outbox.Message{}); err != nil {
		t.Fatalf("Publish(empty) = %v, want nil", err)
	}
	// Nothing arrived: the next message is the first one read back.
	m := s.message(h, 0)
	s.publish(t, h, []outbox.Message{m})
	rs, err := h.Receive(s.ctx(t), 1)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if len(rs) != 1 || rs[0].ID != m.ID {
		t.Fatalf("an empty batch sent something: first message read back is %+v, want %s", rs, m.ID)
	}
}

func (s *suite) perMessageFailure(t *testing.T) {
	if s.f.PermanentInjection {
		t.Run("Permanent", func(t *testing.T) { s.failures(t, true) })
	}
	t.Run("Retryable", func(t *testing.T) { s.failures(t, false) })
}

func (s *suite) failures(t *testing.T, permanent bool) {
	h := s.harness(t)
	if h.Poison == nil {
		t.Fatal("Features.FailureInjection is set but Harness.Poison is nil")
	}
	msgs := make([]outbox.Message, 8)
	bad := map[int]bool{1: true, 4: true, 7: true}
	var good []outbox.Message
	for i := range msgs {
		msgs[i] = s.message(h, i)
		if bad[i] {
			h.Poison(&msgs[i], permanent)
		} else {
			good = append(good, msgs[i])
		}
	}
	err := h.Destination.Publish(s.ctx(t), msgs)
	var be *destination.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("Publish = %v (%T), want a *destination.BatchError", err, err)
	}
	if len(be.Errs) != len(msgs) {
		t.Fatalf("BatchError has %d entries, want %d", len(be.Errs), len(msgs))
	}
	for i := range msgs {
		e := destination.ErrorAt(err, i)
		switch {
		case bad[i] && e == nil:
			t.Errorf("message %d was poisoned but reported as accepted", i)
		case !bad[i] && e != nil:
			t.Errorf("message %d was good but failed: %v", i, e)
		case bad[i] && permanent && !outbox.IsPermanent(e):
			t.Errorf("message %d: want a permanent error, got %v", i, e)
		case bad[i] && !permanent && !outbox.IsRetryable(e):
			t.Errorf("message %d: want a retryable error, got %v", i, e)
		}
	}
	got, _ := s.collect(t, h, good)
	for _, m := range good {
		if string(got[m.ID].Body) != string(m.Payload) {
			t.Errorf("message %s: wrong body %q", m.ID, got[m.ID].Body)
		}
	}
}

func (s *suite) missingTarget(t *testing.T) {
	h := s.harness(t)
	if h.Missing == nil {
		t.Fatal("Features.MissingTarget is set but Harness.Missing is nil")
	}
	d := h.Missing(t)
	t.Cleanup(func() { _ = d.Close() })
	msgs := []outbox.Message{s.message(h, 0), s.message(h, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), s.f.Timeout)
	defer cancel()
	err := d.Publish(ctx, msgs)
	if err == nil {
		t.Fatal("Publish to a missing target returned nil")
	}
	if ctx.Err() != nil {
		t.Fatalf("Publish to a missing target only returned when ctx ended (%v): it must fail by itself", err)
	}
	for i := range msgs {
		if e := destination.ErrorAt(err, i); e == nil || !outbox.IsRetryable(e) {
			t.Errorf("message %d: want a retryable error, got %v", i, e)
		}
	}
}

func (s *suite) closeIdempotent(t *testing.T) {
	h := s.harness(t)
	m := s.message(h, 0)
	s.publish(t, h, []outbox.Message{m})
	s.collect(t, h, []outbox.Message{m})
	if err := h.Destination.Close(); err != nil {
		t.Fatalf("first Close: %v", err)
	}
	if err := h.Destination.Close(); err != nil {
		t.Fatalf("second Close: %v (Close must be idempotent)", err)
	}
	done := make(chan error, 1)
	go func() { done <- h.Destination.Publish(s.ctx(t), []outbox.Message{s.message(h, 1)}) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Publish after Close returned nil")
		}
	case <-time.After(s.f.Timeout):
		t.Fatal("Publish after Close hung")
	}
}

// streamer returns h's destination as a Streamer.
func (s *suite) streamer(t *testing.T, h Harness) destination.Streamer {
	t.Helper()
	st, ok := h.Destination.(destination.Streamer)
	if !ok {
		t.Fatalf("Features.Streamer is set but %T does not implement destination.Streamer", h.Destination)
	}
	return st
}

// eachCalls records the done calls of one PublishEach.
type eachCalls struct {
	t        *testing.T
	mu       sync.Mutex
	calls    []int   // per index
	errs     []error // per index, the last outcome
	returned bool    // PublishEach returned
	changed  chan struct{}
}

func newEachCalls(t *testing.T, n int) *eachCalls {
	return &eachCalls{t: t, calls: make([]int, n), errs: make([]error, n), changed: make(chan struct{}, 1)}
}

func (c *eachCalls) done(i int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case i < 0 || i >= len(c.calls):
		c.t.Errorf("done called for index %d of a batch of %d", i, len(c.calls))
		return
	case c.returned:
		c.t.Errorf("done called for message %d after PublishEach returned", i)
	}
	c.calls[i]++
	c.errs[i] = err
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// publishEach calls PublishEach and checks that done was called exactly
// once per message by the time it returned; it returns the outcomes.
func (c *eachCalls) publishEach(ctx context.Context, st destination.Streamer, msgs []outbox.Message) []error {
	st.PublishEach(ctx, msgs, c.done)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.returned = true
	for i, n := range c.calls {
		if n != 1 {
			c.t.Errorf("done called %d times for message %d; want exactly once, before PublishEach returns", n, i)
		}
	}
	return append([]error(nil), c.errs...)
}

// pending returns the indexes done was not called for yet.
func (c *eachCalls) pending() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for i, n := range c.calls {
		if n == 0 {
			out = append(out, i)
		}
	}
	return out
}

// class describes an outcome as the engine reads it.
func class(err error) string {
	switch {
	case err == nil:
		return "accepted"
	case outbox.IsPermanent(err):
		return "permanent"
	case outbox.IsUnavailable(err):
		return "unavailable"
	case outbox.IsNoRoom(err):
		limit, _ := outbox.NoRoomLimit(err)
		return "no room (" + limit + ")"
	}
	return "retryable"
}

// streamerEachOnce: done is called once per message, and each outcome is
// the one Publish reports for the same message (poisoned messages too,
// when the harness can poison).
func (s *suite) streamerEachOnce(t *testing.T) {
	h := s.harness(t)
	st := s.streamer(t, h)
	batch := func() ([]outbox.Message, []outbox.Message) {
		msgs := make([]outbox.Message, 24)
		var good []outbox.Message
		for i := range msgs {
			msgs[i] = s.message(h, i)
			switch {
			case s.f.FailureInjection && i%7 == 3:
				// Unkeyed: a failure holds back the later messages of
				// its key, which would fail too.
				h.Poison(&msgs[i], s.f.PermanentInjection && i%2 == 1)
			default:
				if i%4 != 0 {
					msgs[i].Key = fmt.Sprintf("k%d", i%3)
				}
				good = append(good, msgs[i])
			}
		}
		return msgs, good
	}
	if s.f.FailureInjection && h.Poison == nil {
		t.Fatal("Features.FailureInjection is set but Harness.Poison is nil")
	}

	msgs, good := batch()
	calls := newEachCalls(t, len(msgs))
	each := calls.publishEach(s.ctx(t), st, msgs)
	s.collect(t, h, good)

	again, goodAgain := batch() // the same messages, with new ids
	err := h.Destination.Publish(s.ctx(t), again)
	s.collect(t, h, goodAgain)
	for i := range msgs {
		if got, want := class(each[i]), class(destination.ErrorAt(err, i)); got != want {
			t.Errorf("message %d: PublishEach reported %s (%v), Publish %s (%v)", i, got, each[i], want, destination.ErrorAt(err, i))
		}
	}

	st.PublishEach(s.ctx(t), nil, func(i int, err error) { t.Errorf("done(%d, %v) for an empty batch", i, err) })
}

// streamerCancelledContext: with ctx cancelled before the call, done is
// called once per message with a failure that is not permanent, and
// PublishEach returns.
func (s *suite) streamerCancelledContext(t *testing.T) {
	h := s.harness(t)
	st := s.streamer(t, h)
	msgs := make([]outbox.Message, 10)
	for i := range msgs {
		msgs[i] = s.message(h, i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := newEachCalls(t, len(msgs))
	finished := make(chan []error, 1)
	go func() { finished <- calls.publishEach(ctx, st, msgs) }()
	select {
	case errs := <-finished:
		for i, err := range errs {
			if err == nil || outbox.IsPermanent(err) {
				t.Errorf("message %d: %v; want a failure that is not permanent (ctx was cancelled)", i, err)
			}
		}
	case <-time.After(s.f.Timeout):
		t.Fatalf("PublishEach with a cancelled context did not return within %v", s.f.Timeout)
	}
}

// streamerSlowMessage: one message whose answer is held does not hold the
// done calls of the others; its own comes once the target answers, and
// PublishEach returns after it.
func (s *suite) streamerSlowMessage(t *testing.T) {
	h := s.harness(t)
	st := s.streamer(t, h)
	if h.Slow == nil {
		t.Fatal("Features.SlowInjection is set but Harness.Slow is nil")
	}
	msgs := make([]outbox.Message, 16)
	for i := range msgs {
		msgs[i] = s.message(h, i)
	}
	const slow = 5
	release := h.Slow(&msgs[slow])
	calls := newEachCalls(t, len(msgs))
	finished := make(chan []error, 1)
	go func() { finished <- calls.publishEach(s.ctx(t), st, msgs) }()

	deadline := time.After(s.f.Timeout)
	for pending := calls.pending(); len(pending) > 1 || (len(pending) == 1 && pending[0] != slow); pending = calls.pending() {
		select {
		case <-calls.changed:
		case errs := <-finished:
			release()
			t.Fatalf("PublishEach returned (outcomes %v) while message %d's answer was held", errs, slow)
		case <-deadline:
			release()
			t.Fatalf("after %v, done was still not called for messages %v, though only message %d's answer is held", s.f.Timeout, pending, slow)
		}
	}
	if p := calls.pending(); len(p) != 1 {
		release()
		t.Fatalf("done was called for the held message %d before its answer came", slow)
	}
	release()
	select {
	case errs := <-finished:
		for i, err := range errs {
			if err != nil {
				t.Errorf("message %d: %v; want accepted", i, err)
			}
		}
	case <-deadline:
		t.Fatalf("PublishEach did not return within %v of the held answer's release", s.f.Timeout)
	}
	s.collect(t, h, msgs)
}
