package cloudevents_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/queuebox/queuebox/destination/cloudevents"
	"github.com/queuebox/queuebox/destination/destinationtest"
	"github.com/queuebox/queuebox/outbox"
)

// TestEventReadBySDK: the structured event of a row is a valid
// CloudEvent for the SDK, with the row's id, time, key and payload.
func TestEventReadBySDK(t *testing.T) {
	enc, err := cloudevents.New(cloudevents.Options{Mode: cloudevents.Structured, Source: "https://shop.example/{{ aggregateType }}"})
	if err != nil {
		t.Fatal(err)
	}
	m := outbox.Message{ID: destinationtest.NewID(), Topic: "order.created", Key: "customer-42", AggregateType: "order",
		CreatedAt: time.Now(), Payload: []byte(`{"total":3,"tags":["x"]}`)}
	b, err := enc.Event(&m)
	if err != nil {
		t.Fatal(err)
	}
	var ev event.Event
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("the SDK cannot read %s: %v", b, err)
	}
	if err := ev.Validate(); err != nil {
		t.Fatalf("the SDK finds %s invalid: %v", b, err)
	}
	out, _ := json.Marshal(ev)
	destinationtest.CheckCloudEvent(t, out, m, "https://shop.example/order", "order.created")
}

func TestOptionsAndRows(t *testing.T) {
	for _, o := range []cloudevents.Options{
		{Mode: "binary"},
		{Mode: "xml", Source: "/s"},
		{Source: "/{{ nope }}"},
		{Source: "/s", Type: "{{ topic"},
	} {
		if _, err := cloudevents.New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
	enc, err := cloudevents.New(cloudevents.Options{Source: "/{{ aggregateType }}", Type: "{{ key }}"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := enc.Attributes(&outbox.Message{ID: "1", Topic: "t", AggregateType: "a"}); !outbox.IsPermanent(err) {
		t.Errorf("type rendering empty: %v, want a permanent failure", err)
	}
}

func TestHeaderValue(t *testing.T) {
	for in, want := range map[string]string{
		"customer-42":     "customer-42",
		"with space":      "with space",
		"line\nbreak":     "line%0Abreak",
		" lead":           "%20lead",
		"50% \"q\"\tend ": "50%25%20%22q%22%09end%20",
		"héllo\x01":       "h%C3%A9llo%01",
	} {
		if got := cloudevents.HeaderValue(in); got != want {
			t.Errorf("HeaderValue(%q) = %q, want %q", in, got, want)
		}
	}
}
