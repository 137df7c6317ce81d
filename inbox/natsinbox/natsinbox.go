// Package natsinbox reads the message id and the trace context of a NATS
// delivery for package inbox. It is a package of its own so that a consumer of another broker
// does not link the NATS client.
package natsinbox

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"
)

// HeaderMsgID is the header the relay puts the message id in.
const HeaderMsgID = "Nats-Msg-Id"

// FromNATS returns the Nats-Msg-Id header of m.
func FromNATS(m *nats.Msg) (string, bool) {
	if m == nil {
		return "", false
	}
	return get(m.Header)
}

// FromJetStream returns the Nats-Msg-Id header of a message consumed with
// the jetstream package.
func FromJetStream(m jetstream.Msg) (string, bool) {
	if m == nil {
		return "", false
	}
	return get(m.Headers())
}

func get(h nats.Header) (string, bool) {
	if h == nil {
		return "", false
	}
	v := strings.TrimSpace(h.Get(HeaderMsgID))
	return v, v != ""
}

// ContextFromNATS returns ctx carrying the W3C trace context of m (its
// traceparent and tracestate headers) as the remote parent: a span the
// consumer starts from it is a child of the relay's span.
func ContextFromNATS(ctx context.Context, m *nats.Msg) context.Context {
	if m == nil {
		return ctx
	}
	return extract(ctx, m.Header)
}

// ContextFromJetStream is ContextFromNATS for a message consumed with the
// jetstream package.
func ContextFromJetStream(ctx context.Context, m jetstream.Msg) context.Context {
	if m == nil {
		return ctx
	}
	return extract(ctx, m.Headers())
}

func extract(ctx context.Context, h nats.Header) context.Context {
	return propagation.TraceContext{}.Extract(ctx, carrier(h))
}

// carrier reads NATS headers, whose names are case-sensitive, in any case.
type carrier nats.Header

func (c carrier) Get(key string) string {
	if v := nats.Header(c).Get(key); v != "" {
		return v
	}
	for k, v := range c {
		if strings.EqualFold(k, key) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

func (c carrier) Set(string, string) {}

func (c carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
