package amqpinbox_test

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/inbox/amqpinbox"
)

func TestFromAMQP(t *testing.T) {
	if _, ok := amqpinbox.FromAMQP(amqp.Delivery{}); ok {
		t.Error("no message id")
	}
	if id, ok := amqpinbox.FromAMQP(amqp.Delivery{MessageId: "m-1"}); !ok || id != "m-1" {
		t.Errorf("got %q %v", id, ok)
	}
}
