package nats

import (
	"slices"
	"strings"
	"testing"

	"github.com/queuebox/queuebox/address"
	"github.com/queuebox/queuebox/destination"
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

// TestRowHeaderPolicy: the broker control headers a row could use to steer
// JetStream are dropped and reported by name: every Nats-* header in any
// case (unless allowed), any header whose name holds Msg-Id or whose value
// names Nats-Msg-Id (never allowed: NATS 2.9 finds the message id by
// searching the header block, and such a header hides it). Other row
// headers pass.
func TestRowHeaderPolicy(t *testing.T) {
	var dropped []string
	d := &Destination{name: "t", headers: destination.NewHeaderFilter([]string{"nats-ttl", "X-Nats-Msg-Id", "Nats-Msg-Id"},
		func(name string) { dropped = append(dropped, name) })}
	m := &outbox.Message{ID: "id-1", Topic: "orders.created", Payload: []byte(`{}`), Headers: map[string]string{
		"Nats-Expected-Stream":      "WRONG",
		"nats-expected-last-seq":    "3",
		"NATS-ROLLUP":               "all",
		"Nats-Schedule":             "@every 1s",
		"X-Nats-Msg-Id":             "forged",
		"x-msg-id":                  "forged",
		"Nats-Msg-Id":               "forged",
		"X-Note":                    "see Nats-Msg-Id",
		"X-Lower":                   "nats-msg-id:x",
		"Nats-TTL":                  "5s",
		"traceparent":               "00-abc-def-01",
		"X-Topic":                   "spoofed",
		"X-Something-Natsy-Msg-Ids": "x",
	}}
	msg, _, err := d.natsMsg("subj", m)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"Nats-TTL", "traceparent"} {
		if got := msg.Header.Get(k); got != m.Headers[k] {
			t.Errorf("header %s = %q, want %q", k, got, m.Headers[k])
		}
	}
	if got := msg.Header.Get(HeaderMsgID); got != "id-1" || len(msg.Header[HeaderMsgID]) != 1 {
		t.Errorf("Nats-Msg-Id = %q", msg.Header[HeaderMsgID])
	}
	if got := msg.Header.Get(HeaderTopic); got != "orders.created" {
		t.Errorf("X-Topic = %q", got)
	}
	want := []string{"NATS-ROLLUP", "Nats-Expected-Stream", "Nats-Msg-Id", "Nats-Schedule", "X-Lower", "X-Nats-Msg-Id", "X-Note",
		"X-Something-Natsy-Msg-Ids", "X-Topic", "nats-expected-last-seq", "x-msg-id"}
	slices.Sort(dropped)
	if !slices.Equal(dropped, want) {
		t.Errorf("dropped %v, want %v", dropped, want)
	}
	if len(msg.Header) != 5 { // Nats-TTL, traceparent and the three of the relay
		t.Errorf("headers sent: %v", msg.Header)
	}
}

// TestWhatHidesTheMessageIDIsPermanent: a topic or key holding the text
// Nats-Msg-Id would hide the real header from a 2.9 server, and a header
// name NATS cannot carry is refused; both before the publish.
func TestWhatHidesTheMessageIDIsPermanent(t *testing.T) {
	d := &Destination{name: "t"}
	for _, m := range []*outbox.Message{
		{ID: "id", Topic: "a.b", Key: "k Nats-Msg-Id: 1", Payload: []byte(`{}`)},
		{ID: "id", Topic: "a.nats-msg-id", Payload: []byte(`{}`)},
		{ID: "id", Topic: "a.b", Payload: []byte(`{}`), Headers: map[string]string{"X Bad": "v"}},
		{ID: "id", Topic: "a.b", Payload: []byte(`{}`), Headers: map[string]string{"X:Bad": "v"}},
	} {
		if _, _, err := d.natsMsg("subj", m); !outbox.IsPermanent(err) {
			t.Errorf("natsMsg(%+v) = %v, want permanent", m, err)
		}
	}
}

// TestSubjectValues: a value other than the topic is one subject token
// unless subjectTokens: allow; wildcards and empty tokens are refused
// either way.
func TestSubjectValues(t *testing.T) {
	tmpl, err := address.ParseTemplate("events.{{ topic }}.{{ key }}")
	if err != nil {
		t.Fatal(err)
	}
	one := &Destination{name: "t", subject: tmpl, tokens: address.TokenRule{Wildcards: "*>"}}
	span := &Destination{name: "t", subject: tmpl, tokens: address.TokenRule{Span: true, Wildcards: "*>"}}
	tests := []struct {
		d           *Destination
		topic, key  string
		want, error string
	}{
		{one, "order.created", "customer-42", "events.order.created.customer-42", ""},
		{one, "order.created", "x.y.z", "", "subjectTokens: allow"},
		{one, "order.created", "a b", "", "whitespace"},
		{one, "order.created", "*", "", "wildcard"},
		{one, "order.created", ">", "", "wildcard"},
		{span, "order.created", "x.y.z", "events.order.created.x.y.z", ""},
		{span, "order.created", "x.>", "", "wildcard"},
		{span, "order.created", "x..y", "", "empty token"},
	}
	for _, tt := range tests {
		m := &outbox.Message{ID: "id", Topic: tt.topic, Key: tt.key}
		got, err := tt.d.subject.RenderEscaped(m, tt.d.subjectValue)
		if err == nil {
			err = validSubject(got, nil)
		}
		switch {
		case tt.error == "" && (err != nil || got != tt.want):
			t.Errorf("key %q: %q, %v; want %q", tt.key, got, err, tt.want)
		case tt.error != "" && (!outbox.IsPermanent(err) || !strings.Contains(err.Error(), tt.error)):
			t.Errorf("key %q: %q, %v; want a permanent error mentioning %q", tt.key, got, err, tt.error)
		}
	}
}
