package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// The Kafka cases (kafka-keyed, kafka-unkeyed) run against the brokers of
// Options.KafkaBrokers (no default: there is no Kafka on the development
// machine; the bench smoke test points them at an in-process kfake
// cluster). Each run creates a topic of kafkaPartitions partitions; the bare
// loop writes each batch with one synchronous WriteMessages (acks=all, key
// = row key, the relay's headers), the relay uses its kafka destination,
// and one reader per partition counts distinct X-Message-Id headers.

const kafkaPartitions = 4

type kafkaWorld struct {
	brokers []string
	client  *kafkago.Client
}

func newKafkaWorld(brokers string) *kafkaWorld {
	var bs []string
	for _, b := range strings.Split(brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			bs = append(bs, b)
		}
	}
	return &kafkaWorld{brokers: bs, client: &kafkago.Client{Addr: kafkago.TCP(bs...), Timeout: 20 * time.Second}}
}

// kafkaSink is one run's topic and the readers counting what reaches it.
type kafkaSink struct {
	k      *kafkaWorld
	topic  string
	cancel context.CancelFunc
	done   chan struct{}
}

// sink creates topic and starts one reader per partition that records
// every record's X-Message-Id in r.
func (k *kafkaWorld) sink(ctx context.Context, topic string, r *receipts) (*kafkaSink, error) {
	res, err := k.client.CreateTopics(ctx, &kafkago.CreateTopicsRequest{Topics: []kafkago.TopicConfig{
		{Topic: topic, NumPartitions: kafkaPartitions, ReplicationFactor: -1}}})
	if err != nil {
		return nil, fmt.Errorf("bench: create Kafka topic %s: %w", topic, err)
	}
	if err := res.Errors[topic]; err != nil {
		return nil, fmt.Errorf("bench: create Kafka topic %s: %w", topic, err)
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &kafkaSink{k: k, topic: topic, cancel: cancel, done: make(chan struct{})}
	finished := make(chan struct{}, kafkaPartitions)
	for p := range kafkaPartitions {
		rd := kafkago.NewReader(kafkago.ReaderConfig{Brokers: k.brokers, Topic: topic, Partition: p,
			MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 50 * time.Millisecond})
		go func() {
			defer func() { _ = rd.Close(); finished <- struct{}{} }()
			for {
				m, err := rd.ReadMessage(rctx)
				if err != nil {
					return
				}
				for _, h := range m.Headers {
					if h.Key == "X-Message-Id" {
						r.add(string(h.Value), time.Now())
					}
				}
			}
		}()
	}
	go func() {
		for range kafkaPartitions {
			<-finished
		}
		close(s.done)
	}()
	return s, nil
}

func (s *kafkaSink) close() {
	s.cancel()
	<-s.done
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = s.k.client.DeleteTopics(ctx, &kafkago.DeleteTopicsRequest{Topics: []string{s.topic}})
}

// writer returns the bare loop's producer for topic.
func (k *kafkaWorld) writer(topic string, batch int) *kafkago.Writer {
	return &kafkago.Writer{Addr: kafkago.TCP(k.brokers...), Topic: topic, Balancer: kafkago.Murmur2Balancer{},
		RequiredAcks: kafkago.RequireAll, BatchSize: batch, BatchTimeout: time.Millisecond}
}

// barePublishKafka writes every row with one synchronous WriteMessages.
func barePublishKafka(w *kafkago.Writer) publishFunc {
	return func(ctx context.Context, rows []bareRow) error {
		msgs := make([]kafkago.Message, len(rows))
		for i := range rows {
			r := &rows[i]
			msgs[i] = kafkago.Message{Value: r.payload, Headers: []kafkago.Header{
				{Key: "X-Message-Id", Value: []byte(r.id)}, {Key: "X-Topic", Value: []byte(r.topic)}, {Key: "X-Attempt", Value: []byte("0")}}}
			if r.key != nil && *r.key != "" {
				msgs[i].Key = []byte(*r.key)
			}
		}
		err := w.WriteMessages(ctx, msgs...)
		var werrs kafkago.WriteErrors
		if errors.As(err, &werrs) {
			return fmt.Errorf("kafka: %d of %d records failed: %w", werrs.Count(), len(msgs), err)
		}
		return err
	}
}
