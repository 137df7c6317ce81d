package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaCluster is a Kafka cluster a test may use: an external one named by
// QUEUEBOX_TEST_KAFKA_BROKERS, or an in-process kfake cluster (the real
// wire protocol, no Docker) started for the test.
type KafkaCluster struct {
	Brokers []string
	// Fake is the in-process cluster, nil when the brokers are external.
	Fake *kfake.Cluster
}

// KafkaTopic is a topic a test needs, with its partition count.
type KafkaTopic struct {
	Name       string
	Partitions int32
}

// Kafka returns a cluster on which topics exist. With
// QUEUEBOX_TEST_KAFKA_BROKERS set, the topics are created there and deleted
// when the test ends (fake is ignored); otherwise a kfake cluster is started
// with the topics seeded and the fake options applied, and closed when the
// test ends.
func Kafka(t testing.TB, topics []KafkaTopic, fake ...kfake.Opt) *KafkaCluster {
	t.Helper()
	if env := strings.TrimSpace(Env("QUEUEBOX_TEST_KAFKA_BROKERS", "")); env != "" {
		brokers := strings.Split(env, ",")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		client := &kafkago.Client{Addr: kafkago.TCP(brokers...), Timeout: 20 * time.Second}
		req := &kafkago.CreateTopicsRequest{}
		for _, tp := range topics {
			p := int(tp.Partitions)
			if p <= 0 {
				p = 1
			}
			req.Topics = append(req.Topics, kafkago.TopicConfig{Topic: tp.Name, NumPartitions: p, ReplicationFactor: -1})
		}
		if len(req.Topics) > 0 {
			res, err := client.CreateTopics(ctx, req)
			if err != nil {
				Unavailable(t, "kafka at "+env, err)
			}
			for name, err := range res.Errors {
				if err != nil {
					t.Fatalf("create kafka topic %s: %v", name, err)
				}
			}
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			names := make([]string, len(topics))
			for i, tp := range topics {
				names[i] = tp.Name
			}
			if len(names) > 0 {
				_, _ = client.DeleteTopics(ctx, &kafkago.DeleteTopicsRequest{Topics: names})
			}
		})
		return &KafkaCluster{Brokers: brokers}
	}
	opts := []kfake.Opt{kfake.NumBrokers(1)}
	for _, tp := range topics {
		opts = append(opts, kfake.SeedTopics(tp.Partitions, tp.Name))
	}
	opts = append(opts, fake...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("kfake cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return &KafkaCluster{Brokers: c.ListenAddrs(), Fake: c}
}

// KafkaTopicName returns a topic name unique to this test run.
func KafkaTopicName(t testing.TB, prefix string) string {
	return prefix + "-" + uniqueSuffix(t)
}

func uniqueSuffix(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '-'
	}, t.Name())
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return strings.Trim(name, "-") + "-" + hex.EncodeToString(b[:])
}

// KafkaRecord is a record read back by KafkaConsume.
type KafkaRecord struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte // nil for a null key
	Value     []byte
	Headers   map[string]string // the last value of each header name
	// HeaderList keeps every header in order, duplicates included.
	HeaderList []KafkaHeader
}

// KafkaHeader is one record header.
type KafkaHeader struct{ Key, Value string }

// KafkaConsume reads topics from the start until n records arrived or d
// passed, and returns what it read (the test decides whether that is
// enough). Records are in partition order within each partition.
func KafkaConsume(t testing.TB, brokers []string, n int, d time.Duration, topics ...string) []KafkaRecord {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	if err != nil {
		t.Fatalf("kafka consumer: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out []KafkaRecord
	for len(out) < n && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			kr := KafkaRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Headers: map[string]string{}}
			for _, h := range r.Headers {
				kr.Headers[h.Key] = string(h.Value)
				kr.HeaderList = append(kr.HeaderList, KafkaHeader{h.Key, string(h.Value)})
			}
			out = append(out, kr)
		})
	}
	return out
}

// ClosedPort returns a local address on which nothing listens: a dial to it
// is refused.
func ClosedPort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}
