// Package kafkainbox reads the message id of a Kafka record
// (segmentio/kafka-go) for package inbox. It is a package of its own so
// that a consumer of another broker does not link the Kafka client.
package kafkainbox

import (
	"strings"

	"github.com/segmentio/kafka-go"
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
