package inbox_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/queuebox/queuebox/inbox"
)

const relaySpan = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestContextFromHTTP(t *testing.T) {
	r := httptest.NewRequest("POST", "/hooks", nil)
	r.Header.Set("Traceparent", relaySpan)
	r.Header.Set("Tracestate", "shop=1")
	sc := trace.SpanContextFromContext(inbox.ContextFromHTTP(context.Background(), r))
	if !sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || sc.TraceState().String() != "shop=1" {
		t.Errorf("span context %v, want the relay's span as the remote parent", sc)
	}
	if sc := trace.SpanContextFromContext(inbox.ContextFromHTTP(context.Background(), httptest.NewRequest("POST", "/", nil))); sc.IsValid() {
		t.Errorf("a delivery without traceparent gave %v", sc)
	}
}
