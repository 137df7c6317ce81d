package natsinbox_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/queuebox/queuebox/inbox/natsinbox"
)

func TestFromNATS(t *testing.T) {
	if _, ok := natsinbox.FromNATS(nil); ok {
		t.Error("nil message")
	}
	m := nats.NewMsg("orders")
	if _, ok := natsinbox.FromNATS(m); ok {
		t.Error("no header")
	}
	m.Header.Set("Nats-Msg-Id", "0190a5b8-0000-7000-8000-000000000001")
	if id, ok := natsinbox.FromNATS(m); !ok || id != "0190a5b8-0000-7000-8000-000000000001" {
		t.Errorf("got %q %v", id, ok)
	}
}
