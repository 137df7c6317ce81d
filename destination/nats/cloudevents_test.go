package nats_test

import (
	"encoding/json"
	"testing"
	"time"

	cejs "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/queuebox/queuebox/destination/cloudevents"
	"github.com/queuebox/queuebox/destination/destinationtest"
	natsdest "github.com/queuebox/queuebox/destination/nats"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
)

// TestCloudEventsReadBySDK: the CloudEvents SDK's NATS JetStream binding
// reads each message, consumed back from the stream, as the event of its
// row, in binary and in structured mode; a row cannot set an attribute.
func TestCloudEventsReadBySDK(t *testing.T) {
	url := testenv.NATSURL(t)
	for _, mode := range []string{cloudevents.Binary, cloudevents.Structured} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			prefix := testenv.UniqueName("qbce")
			_, s := testenv.NATSStreamConfig(t, url, jetstream.StreamConfig{Subjects: []string{prefix + ".>"}, Storage: jetstream.MemoryStorage})
			d := newDest(t, natsdest.Options{Name: "ce", Servers: []string{url}, Subject: "{{ topic }}",
				CloudEvents: &cloudevents.Options{Mode: mode, Source: "/shop/{{ aggregateType }}"}})
			created := time.Now().Add(-time.Minute)
			msgs := []outbox.Message{
				{ID: destinationtest.NewID(), Topic: prefix + ".order.created", Key: "customer-42", AggregateType: "order", CreatedAt: created,
					Payload: []byte(`{"total":12.5}`), Headers: map[string]string{"ce-id": "forged", "ce-tenant": "forged", "content-type": "text/forged"}},
				{ID: destinationtest.NewID(), Topic: prefix + ".order.paid", AggregateType: "order", CreatedAt: created, Payload: []byte(`[1,2]`)},
			}
			if err := d.Publish(testenv.Context(t, 10*time.Second), msgs); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			cons, err := s.OrderedConsumer(testenv.Context(t, 10*time.Second), jetstream.OrderedConsumerConfig{})
			if err != nil {
				t.Fatal(err)
			}
			batch, err := cons.Fetch(len(msgs), jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			i := 0
			for jm := range batch.Messages() {
				m := msgs[i]
				i++
				msg := cejs.NewMessage(&nats.Msg{Subject: jm.Subject(), Header: jm.Headers(), Data: jm.Data()})
				ev, err := binding.ToEvent(t.Context(), msg)
				if err != nil {
					t.Fatalf("message %s: the SDK cannot read it: %v", m.ID, err)
				}
				if err := ev.Validate(); err != nil {
					t.Errorf("message %s: invalid event: %v", m.ID, err)
				}
				if got := jm.Headers().Get("Nats-Msg-Id"); got != m.ID {
					t.Errorf("message %s: Nats-Msg-Id %q", m.ID, got)
				}
				raw, _ := json.Marshal(ev)
				if _, forged := ev.Extensions()["tenant"]; forged {
					t.Errorf("message %s: a row header set an extension: %s", m.ID, raw)
				}
				destinationtest.CheckCloudEvent(t, raw, m, "/shop/order", m.Topic)
			}
			if i != len(msgs) {
				t.Fatalf("read %d messages, want %d", i, len(msgs))
			}
		})
	}
}
