package natsinbox_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/queuebox/queuebox/inbox/natsinbox"
)

func TestContextFromNATS(t *testing.T) {
	for _, name := range []string{"traceparent", "Traceparent"} {
		m := &nats.Msg{Header: nats.Header{name: []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}}
		sc := trace.SpanContextFromContext(natsinbox.ContextFromNATS(context.Background(), m))
		if !sc.IsRemote() || sc.SpanID().String() != "00f067aa0ba902b7" {
			t.Errorf("header %s: span context %v, want the relay's span", name, sc)
		}
	}
	if sc := trace.SpanContextFromContext(natsinbox.ContextFromNATS(context.Background(), &nats.Msg{})); sc.IsValid() {
		t.Errorf("no traceparent gave %v", sc)
	}
}
