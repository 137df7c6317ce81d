// Package amqpinbox reads the message id of an AMQP 0.9.1 delivery
// (rabbitmq/amqp091-go) for package inbox. It is a package of its own so
// that a consumer of another broker does not link the AMQP client.
package amqpinbox

import (
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// FromAMQP returns the message_id property of d, where the relay puts the
// message id.
func FromAMQP(d amqp.Delivery) (string, bool) {
	id := strings.TrimSpace(d.MessageId)
	return id, id != ""
}
