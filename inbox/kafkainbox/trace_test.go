package kafkainbox_test

import (
	"context"
	"testing"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/queuebox/queuebox/inbox/kafkainbox"
)

func TestContextFromKafka(t *testing.T) {
	m := kafka.Message{Headers: []kafka.Header{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}}}
	sc := trace.SpanContextFromContext(kafkainbox.ContextFromKafka(context.Background(), m))
	if !sc.IsRemote() || sc.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("span context %v, want the relay's span", sc)
	}
}
