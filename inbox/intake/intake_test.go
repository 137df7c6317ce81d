package intake

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestApply(t *testing.T) {
	idem, _ := NewField("Idempotency-Key", "")
	order, _ := NewField("", "$.order.customer")
	topic, err := ParseTopic("{{ source }}.{{ header.X-Event }}.{{ payload.order.kind }}")
	if err != nil {
		t.Fatal(err)
	}
	r := Rules{Source: "shop", IdempotencyKey: idem, OrderKey: order, Topic: topic}
	h := http.Header{"Idempotency-Key": {"k-1"}, "X-Event": {"created"}}
	body := &Body{Raw: []byte(`{"order":{"customer":42,"kind":"retail"}}`)}
	out, err := r.Apply(Input{Topic: "shop", Header: h.Get, Body: body})
	if err != nil || out != (Output{IdempotencyKey: "k-1", Key: "42", Topic: "shop.created.retail"}) {
		t.Fatalf("%+v %v", out, err)
	}
	// A message id wins over the configured key; a fallback names a
	// message that has neither.
	out, _ = r.Apply(Input{Header: h.Get, Body: body, MessageID: "m-9"})
	if out.IdempotencyKey != "m-9" {
		t.Errorf("message id not used: %+v", out)
	}
	out, err = r.Apply(Input{Header: http.Header{"X-Event": {"e"}}.Get, Body: body, Fallback: "orders/0/17"})
	if err != nil || out.IdempotencyKey != "orders/0/17" {
		t.Errorf("fallback: %+v %v", out, err)
	}
	// A missing header is a bad request; a missing path or a value too
	// long is unprocessable; an absent order key leaves the message
	// unordered.
	var ie *Error
	if _, err := r.Apply(Input{Header: http.Header{}.Get, Body: body}); !errors.As(err, &ie) || ie.Unprocessable || !errors.Is(err, ErrMissing) {
		t.Errorf("missing header: %v", err)
	}
	long := http.Header{"Idempotency-Key": {strings.Repeat("é", 256)}, "X-Event": {"e"}}
	if _, err := r.Apply(Input{Header: long.Get, Body: body}); !errors.As(err, &ie) || !ie.Unprocessable {
		t.Errorf("long key: %v", err)
	}
	out, err = r.Apply(Input{Header: h.Get, Body: &Body{Raw: []byte(`{"order":{"kind":"x"}}`)}})
	if err != nil || out.Key != "" {
		t.Errorf("absent order key: %+v %v", out, err)
	}
	if _, err := r.Apply(Input{Header: http.Header{"Idempotency-Key": {"k"}}.Get, Body: body}); err == nil || !strings.Contains(err.Error(), "no header X-Event") {
		t.Errorf("topic without its header: %v", err)
	}
}

func TestParseTopicErrors(t *testing.T) {
	for _, s := range []string{"{{ nope }}", "{{ header. }}", "a.{{ topic", "a }} b", "{{ payload }}"} {
		if _, err := ParseTopic(s); err == nil {
			t.Errorf("%q parsed", s)
		}
	}
}

func TestHeaderPolicy(t *testing.T) {
	p := NewHeaderPolicy("x-api-key")
	h := http.Header{"X-Api-Key": {"k"}, "X-Request-Id": {"a", "b"}, "Nats-Msg-Id": {"f"}, "Nats-Expected-Stream": {"s"},
		"X-Message-Id": {"f"}, "Authorization": {"Bearer x"}, "Proxy-Authorization": {"x"}, "X-Attempt": {"3"}}
	got := p.Filter(h)
	if len(got) != 1 || got["X-Request-Id"] != "a, b" {
		t.Errorf("stored %v, want only X-Request-Id", got)
	}
}
