package kafkainbox_test

import (
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/queuebox/queuebox/inbox/kafkainbox"
)

func TestFromKafka(t *testing.T) {
	if _, ok := kafkainbox.FromKafka(kafka.Message{}); ok {
		t.Error("no header")
	}
	m := kafka.Message{Headers: []kafka.Header{{Key: "X-Topic", Value: []byte("a")}, {Key: "x-message-id", Value: []byte("m-1")}}}
	if id, ok := kafkainbox.FromKafka(m); !ok || id != "m-1" {
		t.Errorf("got %q %v", id, ok)
	}
}
