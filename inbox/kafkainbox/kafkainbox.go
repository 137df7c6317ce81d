// Package kafkainbox reads the message id and the trace context of a Kafka record
// (segmentio/kafka-go) for package inbox. It is a package of its own so
// that a consumer of another broker does not link the Kafka client.
package kafkainbox

import (
	"context"
	"strings"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/propagation"
)

// HeaderMessageID is the record header the relay puts the message id in.
const HeaderMessageID = "X-Message-Id"

// FromKafka returns the X-Message-Id header of m (the last one if
// repeated; the name compared case-insensitively).
func FromKafka(m kafka.Message) (string, bool) {
	id := ""
	for _, h := range m.Headers {
		if strings.EqualFold(h.Key, HeaderMessageID) {
			id = strings.TrimSpace(string(h.Value))
		}
	}
	return id, id != ""
}

// ContextFromKafka returns ctx carrying the W3C trace context of m (its
// traceparent and tracestate headers) as the remote parent: a span the
// consumer starts from it is a child of the relay's span.
func ContextFromKafka(ctx context.Context, m kafka.Message) context.Context {
	c := propagation.MapCarrier{}
	for _, h := range m.Headers {
		if k := strings.ToLower(h.Key); k == "traceparent" || k == "tracestate" {
			c[k] = string(h.Value)
		}
	}
	return propagation.TraceContext{}.Extract(ctx, c)
}
