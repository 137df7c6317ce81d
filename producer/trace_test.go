package producer_test

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/producer"
)

// TestTraceContextWritten: a write inside the caller's span stores the
// span's traceparent and tracestate in each row's headers, unless the
// message carries its own; outside a span nothing is added.
func TestTraceContextWritten(t *testing.T) {
	t.Parallel()
	pg := testenv.Postgres(t)
	ctx := testenv.Context(t, 30*time.Second)
	w, err := producer.New()
	if err != nil {
		t.Fatal(err)
	}
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, _ := trace.ParseTraceState("shop=checkout")
	traced := trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts}))
	tx, err := pg.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	own := "00-11111111111111111111111111111111-2222222222222222-01"
	if _, err := w.WritePgx(traced, tx,
		producer.Message{Topic: "order.created", Payload: []byte(`{}`), Headers: map[string]string{"tenant": "acme"}},
		producer.Message{Topic: "order.paid", Payload: []byte(`{}`), Headers: map[string]string{"Traceparent": own}},
	); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WritePgx(ctx, tx, producer.Message{Topic: "order.untraced", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rows := readRows(t, ctx, pg.Pool)
	if len(rows) != 3 {
		t.Fatalf("%d rows", len(rows))
	}
	want := []map[string]string{
		{"tenant": "acme", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "shop=checkout"},
		{"Traceparent": own},
		{},
	}
	for i, r := range rows {
		if len(r.Headers) != len(want[i]) {
			t.Errorf("row %s: headers %v, want %v", r.Topic, r.Headers, want[i])
			continue
		}
		for k, v := range want[i] {
			if r.Headers[k] != v {
				t.Errorf("row %s: headers %v, want %v", r.Topic, r.Headers, want[i])
			}
		}
	}
}
