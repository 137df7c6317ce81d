package kafka_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/destination/destinationtest"
	"github.com/queuebox/queuebox/destination/kafka"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
)

func TestConformance(t *testing.T) {
	destinationtest.Run(t, func(t *testing.T) destinationtest.Harness {
		topic := testenv.KafkaTopicName(t, "conf")
		k := testenv.Kafka(t, []testenv.KafkaTopic{{Name: topic, Partitions: 3}})
		d := newDest(t, kafka.Options{Name: "conf", Brokers: k.Brokers, Topic: "{{ topic }}", BatchBytes: 64 << 10})
		r := newReader(t, k.Brokers, topic)
		return destinationtest.Harness{
			Destination: d,
			Topic:       topic,
			Address:     topic,
			Receive:     r.receive,
			Poison: func(m *outbox.Message, permanent bool) {
				if permanent {
					m.Payload = bytes.Repeat([]byte("x"), 100<<10) // > BatchBytes
				} else {
					m.Topic = topic + "-missing" // no such topic, no auto-creation
				}
			},
			Missing: func(t *testing.T) destination.Destination {
				return newDest(t, kafka.Options{Name: "missing", Brokers: k.Brokers, Topic: topic + "-missing"})
			},
		}
	}, destinationtest.Features{
		KeyPreserved:       true,
		OrderedPerKey:      true,
		FailureInjection:   true,
		PermanentInjection: true,
		MissingTarget:      true,
		IdentityHeaders:    []string{kafka.HeaderMessageID},
		ControlHeaders:     []string{"x-attempt", "X-TOPIC"},
	})
}

// reader consumes a topic from the start for the conformance suite.
type reader struct {
	cl      *kgo.Client
	pending []*kgo.Record
}

func newReader(t *testing.T, brokers []string, topic string) *reader {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &reader{cl: cl}
}

func (r *reader) receive(ctx context.Context, n int) ([]destinationtest.Received, error) {
	for len(r.pending) < n && ctx.Err() == nil {
		fs := r.cl.PollFetches(ctx)
		fs.EachRecord(func(rec *kgo.Record) { r.pending = append(r.pending, rec) })
	}
	take := min(n, len(r.pending))
	out := make([]destinationtest.Received, 0, take)
	for _, rec := range r.pending[:take] {
		got := destinationtest.Received{Address: rec.Topic, Key: string(rec.Key), Body: rec.Value, Headers: map[string]string{}}
		for _, h := range rec.Headers {
			got.Headers[h.Key] = string(h.Value)
		}
		got.ID = got.Headers[kafka.HeaderMessageID]
		out = append(out, got)
	}
	r.pending = r.pending[take:]
	if len(out) < n {
		return out, ctx.Err()
	}
	return out, nil
}
