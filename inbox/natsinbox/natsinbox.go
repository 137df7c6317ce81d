// Package natsinbox reads the message id of a NATS delivery for package
// inbox. It is a package of its own so that a consumer of another broker
// does not link the NATS client.
package natsinbox

import (
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
