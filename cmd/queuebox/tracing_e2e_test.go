package main

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/nats-io/nats.go/jetstream"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/producer"
)

// otlpReceiver is an OTLP/HTTP trace endpoint (protobuf) that keeps every
// span it is sent.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	srv   *httptest.Server
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		var export coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &export)
		}
		if err != nil || req.URL.Path != "/v1/traces" {
			http.Error(w, fmt.Sprintf("%s: %v", req.URL.Path, err), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range export.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// spanOf returns the span whose messaging.message.id is id.
func (r *otlpReceiver) spanOf(id string) *tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.spans {
		for _, a := range s.Attributes {
			if a.Key == "messaging.message.id" && a.Value.GetStringValue() == id {
				return s
			}
		}
	}
	return nil
}

// hookRecorder keeps the headers and body of every webhook delivery.
type hookRecorder struct {
	mu  sync.Mutex
	got map[string]*http.Request // by X-Message-Id; Body replaced by a reader of the bytes
	raw map[string][]byte
}

func (h *hookRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	id := r.Header.Get("X-Message-Id")
	h.got[id], h.raw[id] = r.Clone(r.Context()), b
	w.WriteHeader(http.StatusNoContent)
}

// TestTraceCrossesTheRelay runs the built binary with OTLP/HTTP tracing on
// and JetStream and webhook destinations, the webhook signed with two
// secrets and sent as a binary-mode CloudEvent. Rows written by package
// producer inside a caller's span get a relay span that is that span's
// child; the messages carry the relay span's traceparent; a row without a
// trace starts one. The spans are exported when the relay stops (the
// batch delay is an hour), which shows the flush at shutdown. The webhook
// verifies under both secrets and reads as the row's CloudEvent.
func TestTraceCrossesTheRelay(t *testing.T) {
	otlp := newOTLPReceiver(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.srv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "3600000")
	t.Setenv("OTEL_SERVICE_NAME", "queuebox-e2e")

	w := &world{pg: testenv.Postgres(t), natsURL: testenv.NATSURL(t)}
	w.subject = testenv.UniqueName("qbtrace")
	w.js, w.stream = testenv.NATSStream(t, w.natsURL, w.subject+".>")
	hooks := &hookRecorder{got: map[string]*http.Request{}, raw: map[string][]byte{}}
	hookSrv := httptest.NewServer(hooks)
	t.Cleanup(hookSrv.Close)
	secrets := []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_dGhlIG5ldyBzZWNyZXQgb2YgdGhpcyByb3RhdGlvbg=="}
	cfg := writeConfig(t, fmt.Sprintf(`database:
  url: %q
  outboxTable: %s.outbox
server:
  listen: 127.0.0.1:0
destinations:
  events:
    type: nats
    servers: [%q]
    subject: "%s.{{ topic }}"
  hooks:
    type: http
    url: "%s/hooks/{{ topic }}"
    signing: {secrets: [%q, %q]}
    cloudEvents: {mode: binary, source: /shop}
routes:
  - topicPattern: "order.*"
    destination: events
  - topicPattern: "hook.*"
    destination: hooks
`, w.pg.URL, w.pg.Schema, w.natsURL, w.subject, hookSrv.URL, secrets[0], secrets[1]))

	ctx := testenv.Context(t, time.Minute)
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	traced := trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	pw, err := producer.New()
	if err != nil {
		t.Fatal(err)
	}
	tx, err := w.pg.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tracedIDs, err := pw.WritePgx(traced, tx,
		producer.Message{Topic: "order.created", Key: "o-1", Payload: []byte(`{"n":1}`)},
		producer.Message{Topic: "hook.called", Key: "o-1", Payload: []byte(`{"n":2}`)})
	if err != nil {
		t.Fatal(err)
	}
	plainIDs, err := pw.WritePgx(ctx, tx, producer.Message{Topic: "hook.plain", Payload: []byte(`{"n":3}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	p := startQueuebox(t, "run", "--config", cfg)
	waitAllSent(t, w.pg.Pool, 3, 30*time.Second)
	if code := p.Stop(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("run exited %d", code)
	}

	carried := messageTraceparents(t, w)
	hooks.mu.Lock()
	defer hooks.mu.Unlock()
	for id, r := range hooks.got {
		carried[id] = r.Header.Get("traceparent")
		for _, secret := range secrets {
			wh, err := standardwebhooks.NewWebhook(secret)
			if err != nil {
				t.Fatal(err)
			}
			if err := wh.Verify(hooks.raw[id], r.Header); err != nil {
				t.Errorf("webhook %s does not verify under %s...: %v", id, secret[:10], err)
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(hooks.raw[id]))
		ev, err := cehttp.NewEventFromHTTPRequest(r)
		if err != nil || ev.ID() != id || ev.Source() != "/shop" || ev.Type() != r.Header.Get("X-Topic") {
			t.Errorf("webhook %s as a CloudEvent: %v (err %v)", id, ev, err)
		}
	}
	for _, id := range append(append([]string(nil), tracedIDs...), plainIDs...) {
		s := otlp.spanOf(id)
		if s == nil {
			t.Fatalf("no span exported for row %s (the relay must flush its spans when it stops)", id)
		}
		if s.Kind != tracepb.Span_SPAN_KIND_PRODUCER {
			t.Errorf("row %s: span kind %v, want PRODUCER", id, s.Kind)
		}
		traceID, spanID, parent := hex.EncodeToString(s.TraceId), hex.EncodeToString(s.SpanId), hex.EncodeToString(s.ParentSpanId)
		if id == plainIDs[0] {
			if parent != "" || traceID == tid.String() {
				t.Errorf("row %s without a trace: span %s/%s has parent %q", id, traceID, spanID, parent)
			}
		} else if traceID != tid.String() || parent != sid.String() {
			t.Errorf("row %s: span %s/%s parent %q, want a child of the producer's span %s/%s", id, traceID, spanID, parent, tid, sid)
		}
		if want := "00-" + traceID + "-" + spanID + "-01"; carried[id] != want {
			t.Errorf("row %s: the message carries traceparent %q, want the relay span's %q", id, carried[id], want)
		}
	}
}

// messageTraceparents reads the stream back: the traceparent of each
// message, by Nats-Msg-Id.
func messageTraceparents(t *testing.T, w *world) map[string]string {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	cons, err := w.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		out[m.Headers().Get("Nats-Msg-Id")] = m.Headers().Get("traceparent")
	}
	return out
}
