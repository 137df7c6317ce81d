package kafka_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/IBM/sarama"
	cekafka "github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	"github.com/cloudevents/sdk-go/v2/binding"

	"github.com/queuebox/queuebox/destination/cloudevents"
	"github.com/queuebox/queuebox/destination/destinationtest"
	"github.com/queuebox/queuebox/destination/kafka"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
)

// TestCloudEventsReadBySDK: the CloudEvents SDK's Kafka binding reads each
// record, consumed back from the broker (kfake), as the event of its row,
// in binary and in structured mode; a row cannot set an attribute.
func TestCloudEventsReadBySDK(t *testing.T) {
	for _, mode := range []string{cloudevents.Binary, cloudevents.Structured} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			topic := testenv.KafkaTopicName(t, "ce")
			k := testenv.Kafka(t, []testenv.KafkaTopic{{Name: topic, Partitions: 1}})
			d := newDest(t, kafka.Options{Name: "ce", Brokers: k.Brokers, Topic: "{{ topic }}",
				CloudEvents: &cloudevents.Options{Mode: mode, Source: "/shop/{{ aggregateType }}", Type: "com.shop.{{ topic }}"}})
			created := time.Now().Add(-time.Minute)
			msgs := []outbox.Message{
				{ID: destinationtest.NewID(), Topic: topic, Key: "customer-42", AggregateType: "order", CreatedAt: created,
					Payload: []byte(`{"total":12.5}`), Headers: map[string]string{"ce_id": "forged", "CE_tenant": "forged", "content-type": "text/forged"}},
				{ID: destinationtest.NewID(), Topic: topic, AggregateType: "order", CreatedAt: created, Payload: []byte(`"text"`)},
			}
			if err := d.Publish(testenv.Context(t, 10*time.Second), msgs); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			recs, err := newReader(t, k.Brokers, topic).receive(testenv.Context(t, 10*time.Second), len(msgs))
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range recs {
				m := msgs[i]
				cm := &sarama.ConsumerMessage{Topic: topic, Key: []byte(r.Key), Value: r.Body}
				for name, v := range r.Headers {
					cm.Headers = append(cm.Headers, &sarama.RecordHeader{Key: []byte(name), Value: []byte(v)})
				}
				ev, err := binding.ToEvent(t.Context(), cekafka.NewMessageFromConsumerMessage(cm))
				if err != nil {
					t.Fatalf("record %s: the SDK cannot read it: %v", m.ID, err)
				}
				if err := ev.Validate(); err != nil {
					t.Errorf("record %s: invalid event: %v", m.ID, err)
				}
				if _, forged := ev.Extensions()["tenant"]; forged {
					t.Errorf("record %s: a row header set an extension", m.ID)
				}
				if r.Key != m.Key {
					t.Errorf("record %s: key %q, want the row key %q", m.ID, r.Key, m.Key)
				}
				raw, _ := json.Marshal(ev)
				destinationtest.CheckCloudEvent(t, raw, m, "/shop/order", "com.shop."+topic)
			}
		})
	}
}
