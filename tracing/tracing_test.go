package tracing_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/tracing"
)

func noEnv(string) (string, bool) { return "", false }

// keeper keeps every span exported, past the exporter's shutdown.
type keeper struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
}

func (k *keeper) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.spans = append(k.spans, spans...)
	return nil
}

func (k *keeper) Shutdown(context.Context) error { return nil }

func setup(t *testing.T) (*tracing.Tracing, *keeper) {
	t.Helper()
	exp := &keeper{}
	tr, err := tracing.Setup(t.Context(), tracing.Options{LookupEnv: noEnv, Exporter: exp,
		Systems: map[string]string{"events": "nats"}, Secrets: []string{"hunter2-secret"}, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return tr, exp
}

// flush ends tracing and returns the spans exported.
func flush(t *testing.T, tr *tracing.Tracing, exp *keeper) tracetest.SpanStubs {
	t.Helper()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	exp.mu.Lock()
	defer exp.mu.Unlock()
	return tracetest.SpanStubsFromReadOnlySpans(exp.spans)
}

const (
	rowTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	rowSpan   = "00f067aa0ba902b7"
	rowParent = "00-" + rowTrace + "-" + rowSpan + "-01"
)

func attrs(kvs []attribute.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		out[string(kv.Key)] = kv.Value.String()
	}
	return out
}

// TestSpanIsTheRowsChild: the relay's span is a PRODUCER span whose parent
// is the row's traceparent, with the messaging attributes; the message
// carries the span's own traceparent (and the row's tracestate) in a new
// header map, whatever the case of the row's header names, and the row's
// map is left as it was.
func TestSpanIsTheRowsChild(t *testing.T) {
	tr, exp := setup(t)
	if !tr.Enabled() {
		t.Fatal("tracing with an exporter is not enabled")
	}
	row := map[string]string{"TraceParent": rowParent, "tracestate": "vendor=1", "tenant": "acme"}
	m := outbox.Message{ID: "0192-row", Topic: "order.created", Attempt: 2, Headers: row}
	before := maps.Clone(row)
	end := tr.Start(t.Context(), "events", &m)
	end(nil)
	spans := flush(t, tr, exp)
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if s.SpanKind != trace.SpanKindProducer || s.Name != "send events" {
		t.Errorf("span %q kind %v, want a PRODUCER span named send events", s.Name, s.SpanKind)
	}
	if s.Parent.TraceID().String() != rowTrace || s.Parent.SpanID().String() != rowSpan || s.SpanContext.TraceID().String() != rowTrace {
		t.Errorf("span %v has parent %v, want the row's %s", s.SpanContext, s.Parent, rowParent)
	}
	a := attrs(s.Attributes)
	for k, want := range map[string]string{"messaging.system": "nats", "messaging.destination.name": "events",
		"messaging.message.id": "0192-row", "messaging.operation.type": "send", "messaging.operation.name": "send",
		"queuebox.topic": "order.created", "queuebox.attempt": "2"} {
		if a[k] != want {
			t.Errorf("attribute %s = %q, want %q", k, a[k], want)
		}
	}
	want := "00-" + rowTrace + "-" + s.SpanContext.SpanID().String() + "-01"
	if m.Headers["traceparent"] != want || m.Headers["tracestate"] != "vendor=1" || m.Headers["tenant"] != "acme" {
		t.Errorf("message headers %v, want traceparent %s, the row's tracestate and tenant", m.Headers, want)
	}
	if _, ok := m.Headers["TraceParent"]; ok {
		t.Errorf("the row's own traceparent is still sent: %v", m.Headers)
	}
	if !maps.Equal(row, before) {
		t.Errorf("the row's header map changed: %v", row)
	}
}

// TestRowWithoutTraceStartsOne: a row without a trace context (or with one
// that is not W3C) starts a new trace; a failure is the span's error,
// without the secrets.
func TestRowWithoutTraceStartsOne(t *testing.T) {
	tr, exp := setup(t)
	m := outbox.Message{ID: "r", Topic: "t", Headers: map[string]string{"traceparent": "not-a-trace"}}
	tr.Start(t.Context(), "events", &m)(outbox.Permanent(errors.New("refused with token hunter2-secret")))
	spans := flush(t, tr, exp)
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if s.Parent.IsValid() || !s.SpanContext.IsValid() {
		t.Errorf("span %v parent %v: want a new trace", s.SpanContext, s.Parent)
	}
	if !strings.Contains(m.Headers["traceparent"], s.SpanContext.TraceID().String()) {
		t.Errorf("traceparent %q is not the new span's", m.Headers["traceparent"])
	}
	if a := attrs(s.Attributes); a["queuebox.topic"] != "t" || a["messaging.message.id"] != "r" {
		t.Errorf("attributes %v: want the row's topic and id", a)
	} else if v, ok := a["queuebox.attempt"]; ok {
		t.Errorf("a first attempt carries queuebox.attempt = %s; only retries do", v)
	}
	if s.Status.Code != codes.Error || strings.Contains(s.Status.Description, "hunter2") {
		t.Errorf("status %+v: want an error without the secret", s.Status)
	}
}

// TestUnsampledParentIsFollowed: under the default sampler (parent-based)
// a row whose trace was not sampled records no span, and the message still
// carries the trace, unsampled.
func TestUnsampledParentIsFollowed(t *testing.T) {
	tr, exp := setup(t)
	m := outbox.Message{ID: "r", Headers: map[string]string{"traceparent": "00-" + rowTrace + "-" + rowSpan + "-00"}}
	tr.Start(t.Context(), "events", &m)(nil)
	if spans := flush(t, tr, exp); len(spans) != 0 {
		t.Errorf("%d spans recorded for an unsampled trace", len(spans))
	}
	if tp := m.Headers["traceparent"]; !strings.HasPrefix(tp, "00-"+rowTrace+"-") || !strings.HasSuffix(tp, "-00") || strings.Contains(tp, rowSpan) {
		t.Errorf("traceparent %q: want the row's trace, a new span, unsampled", tp)
	}
}

// TestOffUnlessExporterSet: without OTEL_TRACES_EXPORTER (or with none)
// nothing is built.
func TestOffUnlessExporterSet(t *testing.T) {
	for _, env := range []map[string]string{{}, {"OTEL_TRACES_EXPORTER": "none"}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}} {
		tr, err := tracing.Setup(t.Context(), tracing.Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
		if err != nil || tr.Enabled() {
			t.Errorf("env %v: enabled %v, err %v; want off", env, tr != nil && tr.Enabled(), err)
		}
	}
}

// BenchmarkStart is the cost of a sampled span per row: start, header map,
// end.
func BenchmarkStart(b *testing.B) {
	exp := tracetest.NewInMemoryExporter()
	tr, err := tracing.Setup(context.Background(), tracing.Options{LookupEnv: noEnv, Exporter: exp, Systems: map[string]string{"events": "nats"}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = tr.Shutdown(context.Background()) }()
	headers := map[string]string{"traceparent": rowParent, "tenant": "acme"}
	b.ReportAllocs()
	for b.Loop() {
		m := outbox.Message{ID: "r", Topic: "t", Headers: headers}
		tr.Start(context.Background(), "events", &m)(nil)
		if b.N%1024 == 0 {
			exp.Reset()
		}
	}
}
