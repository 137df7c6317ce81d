// Package amqpinbox reads the message id and the trace context of an AMQP 0.9.1 delivery
// (rabbitmq/amqp091-go) for package inbox. It is a package of its own so
// that a consumer of another broker does not link the AMQP client.
package amqpinbox

import (
	"context"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/propagation"
)

// FromAMQP returns the message_id property of d, where the relay puts the
// message id.
func FromAMQP(d amqp.Delivery) (string, bool) {
	id := strings.TrimSpace(d.MessageId)
	return id, id != ""
}

// ContextFromAMQP returns ctx carrying the W3C trace context of d (its
// traceparent and tracestate headers) as the remote parent: a span the
// consumer starts from it is a child of the relay's span.
func ContextFromAMQP(ctx context.Context, d amqp.Delivery) context.Context {
	c := propagation.MapCarrier{}
	for k, v := range d.Headers {
		if lk := strings.ToLower(k); lk == "traceparent" || lk == "tracestate" {
			if s, ok := v.(string); ok {
				c[lk] = s
			}
		}
	}
	return propagation.TraceContext{}.Extract(ctx, c)
}
