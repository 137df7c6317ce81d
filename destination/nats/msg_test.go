package nats

import (
	"testing"

	"github.com/queuebox/queuebox/outbox"
)

// TestNatsMsgHeaders: the row's headers and the relay's own each carry
// exactly one value, a reserved row header is dropped, and the values,
// which share one backing array, stay independent when a reader appends.
func TestNatsMsgHeaders(t *testing.T) {
	d := &Destination{name: "t"}
	m := &outbox.Message{ID: "id-1", Topic: "orders.created", Key: "k-7", Attempt: 2, Payload: []byte(`{}`),
		Headers: map[string]string{"trace": "abc", "tenant": "t1", "nats-msg-id": "forged"}}
	msg, _, err := d.natsMsg("subj", m)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"trace": "abc", "tenant": "t1", HeaderMsgID: "id-1", HeaderTopic: "orders.created",
		HeaderAttempt: "2", HeaderMessageKey: "k-7"}
	if len(msg.Header) != len(want) {
		t.Fatalf("headers %v, want %v", msg.Header, want)
	}
	for k, v := range want {
		if got := msg.Header[k]; len(got) != 1 || got[0] != v {
			t.Fatalf("header %s = %q, want [%q]", k, got, v)
		}
	}
	msg.Header["trace"] = append(msg.Header["trace"], "appended")
	for k, v := range want {
		if k != "trace" && (len(msg.Header[k]) != 1 || msg.Header[k][0] != v) {
			t.Fatalf("appending to one header changed %s: %q", k, msg.Header[k])
		}
	}
}

func BenchmarkNatsMsg(b *testing.B) {
	d := &Destination{name: "t"}
	m := &outbox.Message{ID: "0193a5f0-7e4c-7a3e-9c1d-2f4b6a8c0e12", Topic: "orders.created", Key: "customer-42",
		Attempt: 0, Payload: make([]byte, 200)}
	b.ReportAllocs()
	for b.Loop() {
		_, _, _ = d.natsMsg("outbox.orders.created", m)
	}
}
