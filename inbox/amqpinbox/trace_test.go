package amqpinbox_test

import (
	"context"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/queuebox/queuebox/inbox/amqpinbox"
)

func TestContextFromAMQP(t *testing.T) {
	d := amqp.Delivery{Headers: amqp.Table{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "x-topic": "t"}}
	sc := trace.SpanContextFromContext(amqpinbox.ContextFromAMQP(context.Background(), d))
	if !sc.IsRemote() || sc.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("span context %v, want the relay's span", sc)
	}
}
