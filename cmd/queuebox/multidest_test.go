package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testenv"
)

// TestRunRoutesToKafkaRabbitMQAndNATS is the end-to-end run of issue 5: one
// route file sends order.* to Kafka keyed by the row key, billing.* to
// RabbitMQ with the exchange taken from aggregate_type, and the rest to
// NATS JetStream. Every row arrives once per id, in per-key order, and each
// Kafka key stays on one partition.
func TestRunRoutesToKafkaRabbitMQAndNATS(t *testing.T) {
	w := newWorld(t, 0)
	kafkaTopic := testenv.KafkaTopicName(t, "orders")
	kc := testenv.Kafka(t, []testenv.KafkaTopic{{Name: kafkaTopic, Partitions: 4}})
	amqpURL := testenv.AMQPURL(t)
	admin := testenv.NewAMQPAdmin(t, amqpURL)
	exchange := testenv.AMQPName(t, "billing")
	admin.Exchange(exchange, "topic")
	queue := admin.Queue("billing", exchange, "#")

	yml := fmt.Sprintf(`database:
  url: %q
  outboxTable: %s.outbox
relay:
  pollInterval: 20ms
server:
  listen: ""
destinations:
  ledger:
    type: kafka
    brokers: [%s]
    topic: %q
  billing:
    type: amqp
    url: %q
    exchangeFrom: aggregate_type
    routingKeyTokens: allow # the test's exchange name holds dots
  events:
    type: nats
    servers: [%q]
    subject: "%s.{{ topic }}"
routes:
  - topicPattern: "order.*"
    destination: ledger
  - topicPattern: "billing.*"
    destination: billing
  - topicPattern: "**"
    destination: events
`, w.pg.URL, w.pg.Schema, strings.Join(kc.Brokers, ", "), kafkaTopic, amqpURL, w.natsURL, w.subject)
	cfg := filepath.Join(t.TempDir(), "multi.yaml")
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}

	const rows, keys = 3000, 60
	insert(t, w.pg.Pool, rows, keys, func(n int) string {
		return []string{"order.created", "billing.charged", "shipment.sent"}[n%3]
	})
	if _, err := w.pg.Pool.Exec(testenv.Context(t, 10*time.Second),
		`UPDATE outbox SET aggregate_type = $1 WHERE topic LIKE 'billing.%'`, exchange); err != nil {
		t.Fatal(err)
	}

	p := startQueuebox(t, "run", "--config", cfg)
	waitAllSent(t, w.pg.Pool, rows, 90*time.Second)
	p.Stop(syscall.SIGTERM, 20*time.Second)
	ids := rowIDs(t, w.pg.Pool)
	want := map[string]int{}
	for _, r := range ids {
		want[strings.SplitN(r[1], ".", 2)[0]]++
	}

	// Kafka: X-Message-Id = id, record key = row key, one partition per key.
	var kafkaGot []delivery
	partitionOf := map[string]int32{}
	for _, r := range testenv.KafkaConsume(t, kc.Brokers, want["order"], 30*time.Second, kafkaTopic) {
		var body struct {
			N int `json:"n"`
		}
		_ = json.Unmarshal(r.Value, &body)
		key := string(r.Key)
		if p, ok := partitionOf[key]; ok && p != r.Partition {
			t.Fatalf("kafka: key %s on partitions %d and %d", key, p, r.Partition)
		}
		partitionOf[key] = r.Partition
		kafkaGot = append(kafkaGot, delivery{ID: r.Headers["X-Message-Id"], Key: key, Topic: r.Headers["X-Topic"], Attempt: r.Headers["X-Attempt"], N: body.N})
	}
	// Order per key holds within a partition; KafkaConsume returns each
	// partition in offset order.
	checkDeliveries(t, "Kafka", kafkaGot, ids, "order.", false)

	// RabbitMQ: message_id = id, headers x-topic and x-message-key.
	var amqpGot []delivery
	for _, d := range admin.Consume(queue, want["billing"], 30*time.Second) {
		var body struct {
			N int `json:"n"`
		}
		_ = json.Unmarshal(d.Body, &body)
		str := func(k string) string { s, _ := d.Headers[k].(string); return s }
		if d.DeliveryMode != 2 {
			t.Fatalf("amqp: message %s not persistent (delivery mode %d)", d.MessageId, d.DeliveryMode)
		}
		amqpGot = append(amqpGot, delivery{ID: d.MessageId, Key: str("x-message-key"), Topic: str("x-topic"), N: body.N})
	}
	checkDeliveries(t, "RabbitMQ", amqpGot, ids, "billing.", false)

	checkDeliveries(t, "JetStream", w.streamMessages(t), ids, "shipment.", false)
}
