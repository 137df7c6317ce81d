package nats_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/destination/destinationtest"
	natsdest "github.com/queuebox/queuebox/destination/nats"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
)

func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() { w.done.Store(true) })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// testWriter logs to the test until it ends; nats.go's callbacks (a
// disconnect after Close) can run later, and t.Log then panics.
type testWriter struct {
	t    *testing.T
	done atomic.Bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	if w.done.Load() {
		return len(p), nil
	}
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func newDest(t *testing.T, o natsdest.Options) *natsdest.Destination {
	t.Helper()
	d, err := natsdest.New(testenv.Context(t, 10*time.Second), o, testLogger(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// reader reads a stream back through an ordered consumer.
type reader struct {
	mu   sync.Mutex
	cons jetstream.Consumer
}

func newReader(t *testing.T, s jetstream.Stream) *reader {
	cons, err := s.OrderedConsumer(testenv.Context(t, 10*time.Second), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("ordered consumer: %v", err)
	}
	return &reader{cons: cons}
}

func (r *reader) receive(ctx context.Context, n int) ([]destinationtest.Received, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []destinationtest.Received
	for len(out) < n {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		wait := 500 * time.Millisecond
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			wait = max(time.Until(dl), time.Millisecond)
		}
		batch, err := r.cons.Fetch(n-len(out), jetstream.FetchMaxWait(wait))
		if err != nil {
			return out, err
		}
		for m := range batch.Messages() {
			h := map[string]string{}
			for k, v := range m.Headers() {
				if len(v) > 0 {
					h[k] = v[0]
				}
			}
			out = append(out, destinationtest.Received{
				ID:      h["Nats-Msg-Id"],
				Address: m.Subject(),
				Key:     h["X-Message-Key"],
				Headers: h,
				Body:    append([]byte(nil), m.Data()...),
			})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return out, err
		}
	}
	return out, nil
}

func TestConformance(t *testing.T) {
	url := testenv.NATSURL(t)
	destinationtest.Run(t, func(t *testing.T) destinationtest.Harness {
		prefix := testenv.UniqueName("qbt")
		_, s := testenv.NATSStreamConfig(t, url, jetstream.StreamConfig{
			Subjects:   []string{prefix + ".>"},
			MaxMsgSize: 64 << 10,
			Storage:    jetstream.MemoryStorage,
		})
		d := newDest(t, natsdest.Options{Name: "conf", Servers: []string{url}, Subject: "{{ topic }}", MaxPending: 64})
		r := newReader(t, s)
		topic := prefix + ".orders.created"
		return destinationtest.Harness{
			Destination: d,
			Topic:       topic,
			Address:     topic,
			Receive:     r.receive,
			Poison: func(m *outbox.Message, permanent bool) {
				if permanent {
					m.Payload = bytes.Repeat([]byte("x"), 100<<10) // > stream max_msg_size
				} else {
					m.Topic = "nostream." + prefix // no stream covers it
				}
			},
			Missing: func(t *testing.T) destination.Destination {
				return newDest(t, natsdest.Options{Name: "missing", Servers: []string{url}, Subject: "nostream." + prefix + ".{{ topic }}"})
			},
		}
	}, destinationtest.Features{
		KeyHeader:          true,
		KeyPreserved:       true,
		OrderedPerKey:      true,
		FailureInjection:   true,
		PermanentInjection: true,
		MissingTarget:      true,
		Streamer:           true,
		IdentityHeaders:    []string{"Nats-Msg-Id"},
		ControlHeaders: []string{"Nats-Expected-Stream", "nats-expected-last-sequence", "Nats-Rollup", "NATS-TTL",
			"Nats-Schedule", "X-Nats-Msg-Id"},
	})
}

func msg(topic string) outbox.Message {
	return outbox.Message{ID: destinationtest.NewID(), Topic: topic, Payload: []byte(`{"a":1}`)}
}

func TestDuplicateAbsorbed(t *testing.T) {
	t.Parallel()
	url := testenv.NATSURL(t)
	subj := testenv.UniqueName("qbt") + ".dup"
	js, s := testenv.NATSStream(t, url, subj)
	d := newDest(t, natsdest.Options{Servers: []string{url}, Subject: subj, Stream: s.CachedInfo().Config.Name})
	ctx := testenv.Context(t, 10*time.Second)

	m := msg("orders")
	if err := d.Publish(ctx, []outbox.Message{m}); err != nil {
		t.Fatalf("first publish: %v", err)
	}
	m.Attempt = 1 // a retry of the same row
	if err := d.Publish(ctx, []outbox.Message{m}); err != nil {
		t.Fatalf("retry inside the duplicate window must succeed, got %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("stream has %d messages, want 1 (Nats-Msg-Id dedup)", info.State.Msgs)
	}
	// The id is the dedup key: the server reports a further copy as a duplicate.
	ack, err := js.Publish(ctx, subj, []byte("x"), jetstream.WithMsgID(m.ID))
	if err != nil || !ack.Duplicate {
		t.Fatalf("raw publish with the same id: ack %+v, err %v; want Duplicate", ack, err)
	}

	w, err := d.DuplicateWindow(ctx)
	if err != nil || w != 2*time.Minute {
		t.Fatalf("DuplicateWindow = %v, %v; want 2m (the default)", w, err)
	}
}

func TestNoStreamIsRetryable(t *testing.T) {
	t.Parallel()
	url := testenv.NATSURL(t)
	subj := "nostream." + testenv.UniqueName("qbt")
	d := newDest(t, natsdest.Options{Servers: []string{url}, Subject: subj})
	err := d.Publish(testenv.Context(t, 10*time.Second), []outbox.Message{msg("t")})
	e := destination.ErrorAt(err, 0)
	if e == nil || outbox.IsPermanent(e) {
		t.Fatalf("want a retryable error, got %v", err)
	}
	if !errors.Is(e, jetstream.ErrNoStreamResponse) {
		t.Errorf("error does not wrap jetstream.ErrNoStreamResponse: %v", e)
	}
	want := `no JetStream stream covers subject "` + subj + `"; create a stream that covers it, or set stream, createStream: true and streamSubjects`
	if !strings.Contains(e.Error(), want) {
		t.Errorf("error %q does not contain %q", e, want)
	}
	if _, err := d.DuplicateWindow(testenv.Context(t, 5*time.Second)); err == nil {
		t.Error("DuplicateWindow without a stream: want an error")
	}
}

// TestMixedOutcomesInOneBatch: every message of a batch gets its own
// outcome when acks and errors interleave. One message in eight goes to a
// subject no stream covers (an error, after the client's retries), the
// others to a stream (an ack), with a window smaller than the batch so that
// the publish loop waits for the collector to free slots.
func TestMixedOutcomesInOneBatch(t *testing.T) {
	t.Parallel()
	url := testenv.NATSURL(t)
	base := testenv.UniqueName("qbt")
	_, s := testenv.NATSStream(t, url, base+".ok")
	d := newDest(t, natsdest.Options{Servers: []string{url}, Subject: base + ".{{ topic }}", MaxPending: 16})
	ctx := testenv.Context(t, 20*time.Second)

	const n = 64
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = msg("ok")
		if i%8 == 7 {
			msgs[i] = msg("nostream")
		}
	}
	err := d.Publish(ctx, msgs)
	want := 0
	for i := range msgs {
		e := destination.ErrorAt(err, i)
		if i%8 == 7 {
			if !errors.Is(e, jetstream.ErrNoStreamResponse) {
				t.Fatalf("message %d (no stream): want ErrNoStreamResponse, got %v", i, e)
			}
			continue
		}
		want++
		if e != nil {
			t.Fatalf("message %d (stream): %v", i, e)
		}
	}
	if info, _ := s.Info(ctx); info == nil || info.State.Msgs != uint64(want) {
		t.Fatalf("stream info %+v: want exactly the %d messages of the stream's subject", info, want)
	}
}

func TestMaxPayloadIsPermanent(t *testing.T) {
	t.Parallel()
	url := testenv.NATSURL(t)
	subj := testenv.UniqueName("qbt") + ".big"
	_, s := testenv.NATSStream(t, url, subj)
	d := newDest(t, natsdest.Options{Servers: []string{url}, Subject: subj})
	ctx := testenv.Context(t, 10*time.Second)

	big := msg("t")
	big.Payload = bytes.Repeat([]byte("y"), 8<<20) // above any default max_payload (1 MiB)
	small := msg("t")
	err := d.Publish(ctx, []outbox.Message{big, small})
	if e := destination.ErrorAt(err, 0); !outbox.IsPermanent(e) || !strings.Contains(e.Error(), "max_payload") {
		t.Fatalf("oversized message: want a permanent error naming max_payload, got %v", e)
	}
	if e := destination.ErrorAt(err, 1); e != nil {
		t.Fatalf("small message of the same batch failed: %v", e)
	}
	if info, _ := s.Info(ctx); info == nil || info.State.Msgs != 1 {
		t.Fatalf("stream info %+v: want exactly the small message", info)
	}
}

func TestCreateStreamAndCheck(t *testing.T) {
	t.Parallel()
	url := testenv.NATSURL(t)
	prefix := testenv.UniqueName("qbt")
	name := strings.ToUpper(prefix)
	ctx := testenv.Context(t, 10*time.Second)
	d := newDest(t, natsdest.Options{
		Servers: []string{url}, Subject: prefix + ".{{ topic }}",
		Stream: name, CreateStream: true, StreamSubjects: []string{prefix + ".>"},
	})
	js, _ := testenv.NATSStreamConfig(t, url, jetstream.StreamConfig{Name: testenv.UniqueName("QBTEST_"), Subjects: []string{testenv.UniqueName("unused") + ".x"}})
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })

	if err := d.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if err := d.Publish(ctx, []outbox.Message{msg("a"), msg("b")}); err != nil {
		t.Fatalf("Publish into created stream: %v", err)
	}
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("created stream: %v", err)
	}
	if n := s.CachedInfo().State.Msgs; n != 2 {
		t.Fatalf("stream has %d messages, want 2", n)
	}
	if w, err := d.DuplicateWindow(ctx); err != nil || w <= 0 {
		t.Fatalf("DuplicateWindow = %v, %v", w, err)
	}
	// A second destination finds the stream already there.
	newDest(t, natsdest.Options{Servers: []string{url}, Subject: prefix + ".x", Stream: name, CreateStream: true, StreamSubjects: []string{prefix + ".>"}})
	_ = d.Close()
	if err := d.Check(ctx); err == nil {
		t.Fatal("Check after Close: want an error")
	}
}

func TestConnectErrorNamesServerWithoutSecrets(t *testing.T) {
	t.Parallel()
	_, err := natsdest.New(testenv.Context(t, 10*time.Second), natsdest.Options{
		Name: "events", Servers: []string{"nats://alice:s3cr3t@127.0.0.1:1"}, Subject: "x", ConnectTimeout: time.Second,
	}, testLogger(t))
	if err == nil {
		t.Fatal("New against a closed port: want an error")
	}
	if !strings.Contains(err.Error(), "127.0.0.1:1") || !strings.Contains(err.Error(), `"events"`) {
		t.Errorf("error %q does not name the destination and server", err)
	}
	if strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("error leaks the password: %q", err)
	}
}

func TestBadOptions(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 5*time.Second)
	for name, o := range map[string]natsdest.Options{
		"unknown placeholder": {Subject: "{{ nope }}"},
		"both subject forms":  {Subject: "a", SubjectFrom: "topic"},
		"bad subjectFrom":     {SubjectFrom: "payload"},
	} {
		if _, err := natsdest.New(ctx, o, testLogger(t)); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
}

func TestServerRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := testenv.EmbeddedNATS(t, dir, -1)
	port := testenv.EmbeddedNATSPort(srv)
	url := srv.ClientURL()
	subj := testenv.UniqueName("qbt") + ".restart"
	_, s := testenv.NATSStreamConfig(t, url, jetstream.StreamConfig{Name: "RESTART", Subjects: []string{subj}})
	d := newDest(t, natsdest.Options{Servers: []string{url}, Subject: subj, ReconnectWait: 20 * time.Millisecond, AckTimeout: 2 * time.Second})

	ctx := testenv.Context(t, 30*time.Second)
	if err := d.Publish(ctx, []outbox.Message{msg("a")}); err != nil {
		t.Fatalf("publish before stop: %v", err)
	}
	if _, err := s.Info(ctx); err != nil {
		t.Fatal(err)
	}

	srv.Shutdown()
	srv.WaitForShutdown()
	testenv.Eventually(t, 10*time.Second, func() bool {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		start := time.Now()
		err := d.Publish(pctx, []outbox.Message{msg("b"), msg("c")})
		if el := time.Since(start); el > 1500*time.Millisecond {
			t.Fatalf("Publish with the server down took %v, more than its ctx allows", el)
		}
		for i := range 2 {
			if e := destination.ErrorAt(err, i); e == nil || !outbox.IsUnavailable(e) {
				return false
			}
		}
		return true
	}, "Publish never reported Unavailable while the server was down")
	if err := d.Check(ctx); !outbox.IsUnavailable(err) {
		t.Errorf("Check while down = %v, want Unavailable", err)
	}

	testenv.EmbeddedNATS(t, dir, port)
	var last error
	testenv.Eventually(t, 15*time.Second, func() bool {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		last = d.Publish(pctx, []outbox.Message{msg("d")})
		return last == nil
	}, "publishing did not recover after the restart (last error: %v)", &last)
	if err := d.Check(ctx); err != nil {
		t.Errorf("Check after restart: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs < 2 {
		t.Fatalf("stream has %d messages after restart, want the one from before and the new one", info.State.Msgs)
	}
}

// TestStreamWarning: what `queuebox check` and the relay's start say about
// where the messages will be stored. A static subject that no stream covers
// is named (every publish would fail); a subject template without a stream
// cannot be checked, and says so with the fix; a covered static subject and
// a configured stream raise nothing.
func TestStreamWarning(t *testing.T) {
	t.Parallel()
	url := testenv.NATSURL(t)
	prefix := testenv.UniqueName("qbt")
	ctx := testenv.Context(t, 10*time.Second)

	uncovered := newDest(t, natsdest.Options{Servers: []string{url}, Subject: prefix + ".nowhere"})
	if w := uncovered.StreamWarning(ctx); !strings.Contains(w, `no JetStream stream covers subject "`+prefix+`.nowhere"`) || !strings.Contains(w, "createStream") {
		t.Errorf("static subject no stream covers: warning %q", w)
	}
	template := newDest(t, natsdest.Options{Servers: []string{url}, Subject: prefix + ".{{ topic }}"})
	if w := template.StreamWarning(ctx); !strings.Contains(w, "is a template and no stream is set") || !strings.Contains(w, "Set stream") {
		t.Errorf("subject template without a stream: warning %q", w)
	}

	name := strings.ToUpper(prefix)
	js, _ := testenv.NATSStreamConfig(t, url, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".>"}})
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	covered := newDest(t, natsdest.Options{Servers: []string{url}, Subject: prefix + ".orders"})
	if w := covered.StreamWarning(ctx); w != "" {
		t.Errorf("static subject a stream covers: warning %q, want none", w)
	}
	named := newDest(t, natsdest.Options{Servers: []string{url}, Subject: prefix + ".{{ topic }}", Stream: name})
	if w := named.StreamWarning(ctx); w != "" {
		t.Errorf("stream set: warning %q, want none", w)
	}
}

// TestSubjectStreamLookedUpOnce: the relay's start asks both StreamWarning
// and DuplicateWindow about a static subject without a configured stream;
// the stream covering it is looked up once ($JS.API.STREAM.NAMES requests
// naming the subject, seen by a subscriber on that API subject), and a
// failed lookup is asked again.
func TestSubjectStreamLookedUpOnce(t *testing.T) {
	t.Parallel()
	url := testenv.NATSURL(t)
	prefix := testenv.UniqueName("qbt")
	ctx := testenv.Context(t, 10*time.Second)

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// A channel subscription is fed by the connection's reader, so once a
	// Flush returns every request routed to it before is in the channel.
	requests := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe("$JS.API.STREAM.NAMES", requests)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	lookups := 0
	// seen counts the lookups so far. The server copies another
	// connection's request to this subscription with no order against
	// this connection's Flush, so it also waits until none has arrived
	// for 200 ms.
	seen := func() int {
		t.Helper()
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case m := <-requests:
				if bytes.Contains(m.Data, []byte(prefix)) {
					lookups++
				}
			case <-time.After(200 * time.Millisecond):
				return lookups
			}
		}
	}

	d := newDest(t, natsdest.Options{Servers: []string{url}, Subject: prefix + ".orders"})
	if w := d.StreamWarning(ctx); !strings.Contains(w, "no JetStream stream covers") {
		t.Fatalf("before the stream exists: warning %q", w)
	}
	if _, err := d.DuplicateWindow(ctx); err == nil {
		t.Fatal("DuplicateWindow before the stream exists: want an error")
	}
	if n := seen(); n != 2 {
		t.Fatalf("%d lookups while no stream covers the subject, want 2 (a failed lookup is not remembered)", n)
	}

	name := strings.ToUpper(prefix)
	testenv.NATSStreamConfig(t, url, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".>"}, Duplicates: 5 * time.Minute})
	if w := d.StreamWarning(ctx); w != "" {
		t.Fatalf("covered subject: warning %q", w)
	}
	if w, err := d.DuplicateWindow(ctx); err != nil || w != 5*time.Minute {
		t.Fatalf("DuplicateWindow = %v, %v; want 5m", w, err)
	}
	if n := seen(); n != 3 {
		t.Fatalf("%d lookups, want 3: the stream found by StreamWarning is the one DuplicateWindow reads", n)
	}
}

// TestCheckOnlyLeavesAMissingStreamMissing: with CheckOnly (queuebox
// check), a stream that createStream would create is reported, not
// created; without it, New creates it.
func TestCheckOnlyLeavesAMissingStreamMissing(t *testing.T) {
	t.Parallel()
	url := testenv.NATSURL(t)
	prefix := testenv.UniqueName("qbt")
	name := strings.ToUpper(prefix)
	ctx := testenv.Context(t, 10*time.Second)
	o := natsdest.Options{Servers: []string{url}, Subject: prefix + ".{{ topic }}", Stream: name, CreateStream: true, StreamSubjects: []string{prefix + ".>"}, CheckOnly: true}
	d := newDest(t, o)
	if got := d.StreamToCreate(); got != name {
		t.Fatalf("StreamToCreate = %q, want %q", got, name)
	}
	if err := d.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	js, _ := testenv.NATSStreamConfig(t, url, jetstream.StreamConfig{Name: testenv.UniqueName("QBTEST_"), Subjects: []string{testenv.UniqueName("unused") + ".x"}})
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	if _, err := js.Stream(ctx, name); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("after a check-only New the stream %s: %v, want it still missing", name, err)
	}
	o.CheckOnly = false
	if d := newDest(t, o); d.StreamToCreate() != "" {
		t.Errorf("StreamToCreate after creating it = %q", d.StreamToCreate())
	}
	if _, err := js.Stream(ctx, name); err != nil {
		t.Fatalf("New without CheckOnly did not create the stream: %v", err)
	}
}
