package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/destination/kafka"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
)

func newDest(t *testing.T, opts kafka.Options) *kafka.Destination {
	t.Helper()
	if opts.Name == "" {
		opts.Name = "test"
	}
	d, err := kafka.New(opts, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func msg(i int, topic, key string) outbox.Message {
	return outbox.Message{
		ID:      fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
		Topic:   topic,
		Key:     key,
		Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)),
		Headers: map[string]string{},
	}
}

func TestPublishKeyedOrderedOnePartitionPerKey(t *testing.T) {
	t.Parallel()
	topic := testenv.KafkaTopicName(t, "orders")
	k := testenv.Kafka(t, []testenv.KafkaTopic{{Name: topic, Partitions: 4}})
	d := newDest(t, kafka.Options{Brokers: k.Brokers, Topic: topic})
	ctx := testenv.Context(t, 30*time.Second)

	const keys, rounds = 20, 10
	n := 0
	want := map[string]outbox.Message{}
	for r := range rounds {
		// The relay sends at most one row per key in a batch.
		batch := make([]outbox.Message, 0, keys)
		for k := range keys {
			m := msg(n, "order.created", fmt.Sprintf("key-%d", k))
			m.Sequence = int64(r)
			m.Attempt = r % 2
			m.Headers["tenant"] = "acme"
			batch = append(batch, m)
			want[m.ID] = m
			n++
		}
		if err := d.Publish(ctx, batch); err != nil {
			t.Fatalf("Publish round %d: %v", r, err)
		}
	}

	recs := testenv.KafkaConsume(t, k.Brokers, n, 20*time.Second, topic)
	if len(recs) != n {
		t.Fatalf("consumed %d records, want %d", len(recs), n)
	}
	seen := map[string]bool{}
	partOf := map[string]int32{}
	lastSeq := map[string]int64{}
	partitions := []int{0, 1, 2, 3}
	used := map[int32]bool{}
	for _, r := range recs {
		id := r.Headers[kafka.HeaderMessageID]
		m, ok := want[id]
		if !ok {
			t.Fatalf("record with unknown X-Message-Id %q", id)
		}
		if seen[id] {
			t.Fatalf("X-Message-Id %s delivered twice", id)
		}
		seen[id] = true
		if string(r.Key) != m.Key {
			t.Errorf("record %s: key %q, want %q", id, r.Key, m.Key)
		}
		if !bytes.Equal(r.Value, m.Payload) {
			t.Errorf("record %s: value %q, want %q", id, r.Value, m.Payload)
		}
		if r.Headers[kafka.HeaderTopic] != m.Topic || r.Headers[kafka.HeaderAttempt] != strconv.Itoa(m.Attempt) || r.Headers["tenant"] != "acme" {
			t.Errorf("record %s: headers %v", id, r.Headers)
		}
		if p, ok := partOf[m.Key]; ok && p != r.Partition {
			t.Errorf("key %s on partitions %d and %d", m.Key, p, r.Partition)
		}
		partOf[m.Key] = r.Partition
		used[r.Partition] = true
		// Java producers' murmur2 partition for this key.
		if wantP := (kafkago.Murmur2Balancer{}).Balance(kafkago.Message{Key: r.Key}, partitions...); int32(wantP) != r.Partition {
			t.Errorf("key %s on partition %d, murmur2 says %d", m.Key, r.Partition, wantP)
		}
		// Records of one partition come back in offset order.
		if prev, ok := lastSeq[m.Key]; ok && m.Sequence <= prev {
			t.Errorf("key %s: sequence %d after %d", m.Key, m.Sequence, prev)
		}
		lastSeq[m.Key] = m.Sequence
	}
	if len(used) < 2 {
		t.Errorf("20 keys landed on %d partition(s) of 4", len(used))
	}
}

func TestMurmur2MatchesJavaProducer(t *testing.T) {
	// Values from org.apache.kafka.common.utils.Utils.murmur2 (Kafka's
	// UtilsTest): toPositive(murmur2(key)) % partitions.
	cases := map[string]uint32{
		"21":                       uint32(-973932308 & 0x7fffffff),
		"foobar":                   uint32(-790332482 & 0x7fffffff),
		"a-little-bit-long-string": uint32(-985981536 & 0x7fffffff),
	}
	for key, pos := range cases {
		partitions := make([]int, 1000)
		for i := range partitions {
			partitions[i] = i
		}
		got := (kafkago.Murmur2Balancer{}).Balance(kafkago.Message{Key: []byte(key)}, partitions...)
		if want := int(pos % 1000); got != want {
			t.Errorf("key %q: partition %d, Java producer %d", key, got, want)
		}
	}
}

func TestHeadersAndNullKey(t *testing.T) {
	t.Parallel()
	topic := testenv.KafkaTopicName(t, "hdr")
	k := testenv.Kafka(t, []testenv.KafkaTopic{{Name: topic, Partitions: 1}})
	d := newDest(t, kafka.Options{Brokers: k.Brokers, Topic: topic})
	ctx := testenv.Context(t, 20*time.Second)

	m := msg(1, "a.b", "")
	m.Headers = map[string]string{"x-message-id": "spoofed", "X-Trace": "t1", "x-attempt": "7", "X-TOPIC": "spoofed"}
	if err := d.Publish(ctx, []outbox.Message{m}); err != nil {
		t.Fatal(err)
	}
	recs := testenv.KafkaConsume(t, k.Brokers, 1, 10*time.Second, topic)
	if len(recs) != 1 {
		t.Fatalf("got %d records", len(recs))
	}
	r := recs[0]
	if r.Key != nil {
		t.Errorf("empty row key sent as %q, want a null key", r.Key)
	}
	var ids []string
	for _, h := range r.HeaderList {
		if h.Key == kafka.HeaderMessageID || h.Key == "x-message-id" {
			ids = append(ids, h.Value)
		}
	}
	if len(ids) != 1 || ids[0] != m.ID {
		t.Errorf("identity headers %v, want exactly [%s]", ids, m.ID)
	}
	if r.Headers["X-Trace"] != "t1" || r.Headers[kafka.HeaderAttempt] != "0" || r.Headers[kafka.HeaderTopic] != "a.b" {
		t.Errorf("headers %v", r.Headers)
	}
	// Row headers named like the relay's own are dropped, whatever their case.
	if len(r.HeaderList) != 4 {
		t.Errorf("headers %v, want X-Message-Id, X-Topic, X-Attempt and X-Trace only", r.HeaderList)
	}
}

func TestTopicTemplateAndMissingTopic(t *testing.T) {
	t.Parallel()
	a, b := testenv.KafkaTopicName(t, "inv"), testenv.KafkaTopicName(t, "pay")
	missing := testenv.KafkaTopicName(t, "missing")
	k := testenv.Kafka(t, []testenv.KafkaTopic{{Name: a, Partitions: 2}, {Name: b, Partitions: 2}})
	d := newDest(t, kafka.Options{Brokers: k.Brokers, Topic: "{{ aggregateType }}"})
	ctx := testenv.Context(t, 30*time.Second)

	batch := []outbox.Message{msg(1, "t", "k1"), msg(2, "t", "k2"), msg(3, "t", "k3"), msg(4, "t", "")}
	batch[0].AggregateType = a
	batch[1].AggregateType = b
	batch[2].AggregateType = missing
	batch[3].AggregateType = "" // renders empty: permanent
	err := d.Publish(ctx, batch)
	var be *destination.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("Publish = %v, want a *BatchError", err)
	}
	if be.Errs[0] != nil || be.Errs[1] != nil {
		t.Fatalf("records to existing topics failed: %v", be.Errs)
	}
	if e := be.Errs[2]; e == nil || outbox.IsPermanent(e) || outbox.IsUnavailable(e) || !errors.Is(e, kafkago.UnknownTopicOrPartition) {
		t.Errorf("missing topic: %v (permanent=%v), want retryable UnknownTopicOrPartition", e, outbox.IsPermanent(e))
	}
	if e := be.Errs[3]; !outbox.IsPermanent(e) {
		t.Errorf("empty topic: %v, want permanent", e)
	}
	if got := testenv.KafkaConsume(t, k.Brokers, 2, 10*time.Second, a, b); len(got) != 2 {
		t.Errorf("consumed %d records, want 2", len(got))
	}
}

func TestCreateTopics(t *testing.T) {
	t.Parallel()
	topic := testenv.KafkaTopicName(t, "auto")
	k := testenv.Kafka(t, nil, kfake.AllowAutoTopicCreation())
	if k.Fake == nil {
		t.Skip("external cluster: auto.create.topics.enable is the broker's setting")
	}
	d := newDest(t, kafka.Options{Brokers: k.Brokers, Topic: topic, CreateTopics: true})
	ctx := testenv.Context(t, 20*time.Second)
	var err error
	// The first metadata request creates the topic; its leader may need a
	// moment, which the writer retries.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err = d.Publish(ctx, []outbox.Message{msg(1, "x", "k")}); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("Publish with createTopics: %v", err)
	}
	if got := testenv.KafkaConsume(t, k.Brokers, 1, 10*time.Second, topic); len(got) != 1 {
		t.Errorf("consumed %d records, want 1", len(got))
	}
}

func TestMessageTooLargeIsPermanentAndIsolated(t *testing.T) {
	t.Parallel()
	topic := testenv.KafkaTopicName(t, "big")
	k := testenv.Kafka(t, []testenv.KafkaTopic{{Name: topic, Partitions: 1}},
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": "2000"}))
	if k.Fake == nil {
		t.Skip("needs a broker with a small message.max.bytes")
	}
	d := newDest(t, kafka.Options{Brokers: k.Brokers, Topic: topic})
	ctx := testenv.Context(t, 20*time.Second)
	big := msg(2, "t", "k2")
	big.Payload = []byte(`{"pad":"` + string(bytes.Repeat([]byte("x"), 5000)) + `"}`)
	batch := []outbox.Message{msg(1, "t", "k1"), big, msg(3, "t", "k3")}
	err := d.Publish(ctx, batch)
	var be *destination.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("Publish = %v, want a *BatchError", err)
	}
	if be.Errs[0] != nil || be.Errs[2] != nil {
		t.Errorf("small records failed with the large one: %v", be.Errs)
	}
	if !outbox.IsPermanent(be.Errs[1]) || !errors.Is(be.Errs[1], kafkago.MessageSizeTooLarge) {
		t.Errorf("large record: %v, want permanent MessageSizeTooLarge", be.Errs[1])
	}
	if got := testenv.KafkaConsume(t, k.Brokers, 2, 10*time.Second, topic); len(got) != 2 {
		t.Errorf("consumed %d records, want 2", len(got))
	}
}

func TestLargerThanBatchBytesIsPermanent(t *testing.T) {
	t.Parallel()
	topic := testenv.KafkaTopicName(t, "bb")
	k := testenv.Kafka(t, []testenv.KafkaTopic{{Name: topic, Partitions: 1}})
	d := newDest(t, kafka.Options{Brokers: k.Brokers, Topic: topic, BatchBytes: 1000})
	ctx := testenv.Context(t, 20*time.Second)
	big := msg(2, "t", "k2")
	big.Payload = bytes.Repeat([]byte("y"), 3000)
	err := d.Publish(ctx, []outbox.Message{msg(1, "t", "k1"), big, msg(3, "t", "k3")})
	var be *destination.BatchError
	if !errors.As(err, &be) || be.Errs[0] != nil || be.Errs[2] != nil || !outbox.IsPermanent(be.Errs[1]) {
		t.Fatalf("Publish = %v, want only record 1 failing permanently", err)
	}
}

func TestBrokerDownIsUnavailable(t *testing.T) {
	t.Parallel()
	d := newDest(t, kafka.Options{Brokers: []string{testenv.ClosedPort(t)}, Topic: "t", DialTimeout: time.Second, MaxAttempts: 1})
	ctx := testenv.Context(t, 20*time.Second)
	err := d.Publish(ctx, []outbox.Message{msg(1, "t", "k"), msg(2, "t", "k2")})
	if err == nil || !outbox.IsUnavailable(err) || !outbox.IsRetryable(err) {
		t.Fatalf("Publish to a closed port = %v, want an Unavailable, retryable error", err)
	}
	var be *destination.BatchError
	if errors.As(err, &be) {
		t.Errorf("whole-destination failure reported per message: %v", err)
	}
	if err := d.Check(ctx); !outbox.IsUnavailable(err) {
		t.Errorf("Check = %v, want Unavailable", err)
	}
}

func TestBrokerStopsMidStream(t *testing.T) {
	t.Parallel()
	topic := testenv.KafkaTopicName(t, "stop")
	k := testenv.Kafka(t, []testenv.KafkaTopic{{Name: topic, Partitions: 1}})
	if k.Fake == nil {
		t.Skip("needs an in-process cluster to stop")
	}
	d := newDest(t, kafka.Options{Brokers: k.Brokers, Topic: topic, DialTimeout: time.Second, MaxAttempts: 1, WriteTimeout: 2 * time.Second})
	ctx := testenv.Context(t, 20*time.Second)
	if err := d.Publish(ctx, []outbox.Message{msg(1, "t", "k")}); err != nil {
		t.Fatal(err)
	}
	k.Fake.Close()
	err := d.Publish(ctx, []outbox.Message{msg(2, "t", "k")})
	if err == nil || !outbox.IsRetryable(err) {
		t.Fatalf("Publish after the broker stopped = %v, want a retryable error", err)
	}
	if !outbox.IsUnavailable(err) {
		t.Errorf("Publish after the broker stopped = %v, want Unavailable", err)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	topic := testenv.KafkaTopicName(t, "chk")
	k := testenv.Kafka(t, []testenv.KafkaTopic{{Name: topic, Partitions: 1}})
	ctx := testenv.Context(t, 20*time.Second)
	if err := newDest(t, kafka.Options{Brokers: k.Brokers, Topic: topic}).Check(ctx); err != nil {
		t.Errorf("Check of an existing topic: %v", err)
	}
	if err := newDest(t, kafka.Options{Brokers: k.Brokers, Topic: "{{ aggregateType }}"}).Check(ctx); err != nil {
		t.Errorf("Check with a templated topic: %v", err)
	}
	if err := newDest(t, kafka.Options{Brokers: k.Brokers, Topic: topic + "-nope"}).Check(ctx); err == nil {
		t.Errorf("Check of a missing literal topic succeeded")
	}
}

func TestSASL(t *testing.T) {
	t.Parallel()
	for _, mech := range []string{kafka.MechanismPlain, kafka.MechanismSCRAMSHA256, kafka.MechanismSCRAMSHA512} {
		t.Run(mech, func(t *testing.T) {
			t.Parallel()
			topic := testenv.KafkaTopicName(t, "sasl")
			k := testenv.Kafka(t, []testenv.KafkaTopic{{Name: topic, Partitions: 1}},
				kfake.EnableSASL(), kfake.Superuser(mech, "relay", "s3cret"))
			if k.Fake == nil {
				t.Skip("SASL users are set up on the in-process cluster only")
			}
			ctx := testenv.Context(t, 20*time.Second)
			d := newDest(t, kafka.Options{Brokers: k.Brokers, Topic: topic,
				SASL: &kafka.SASL{Mechanism: mech, Username: "relay", Password: "s3cret"}})
			if err := d.Publish(ctx, []outbox.Message{msg(1, "t", "k")}); err != nil {
				t.Fatalf("Publish with SASL %s: %v", mech, err)
			}
			bad := newDest(t, kafka.Options{Brokers: k.Brokers, Topic: topic, MaxAttempts: 1,
				SASL: &kafka.SASL{Mechanism: mech, Username: "relay", Password: "wrong-password"}})
			err := bad.Publish(ctx, []outbox.Message{msg(2, "t", "k")})
			if !outbox.IsUnavailable(err) {
				t.Fatalf("Publish with a wrong password = %v, want unavailable", err)
			}
			if bytes.Contains([]byte(err.Error()), []byte("wrong-password")) {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for name, o := range map[string]kafka.Options{
		"no brokers":    {Topic: "t"},
		"no topic":      {Brokers: []string{"x:9092"}},
		"bad topic":     {Brokers: []string{"x:9092"}, Topic: "{{ nope }}"},
		"bad key":       {Brokers: []string{"x:9092"}, Topic: "t", Key: "{{ key"},
		"bad mechanism": {Brokers: []string{"x:9092"}, Topic: "t", SASL: &kafka.SASL{Mechanism: "GSSAPI"}},
	} {
		if _, err := kafka.New(o, nil); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

// TestClassify: the class of each kafka-go error Publish can meet.
func TestClassify(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	const (
		permanent   = "permanent"
		unavailable = "unavailable"
		rowFailed   = "row failed"
	)
	noRoom := func(limit string) string { return "no room " + limit }
	classOf := func(err error) string {
		switch {
		case outbox.IsPermanent(err):
			return permanent
		case outbox.IsUnavailable(err):
			return unavailable
		case outbox.IsNoRoom(err):
			limit, _ := outbox.NoRoomLimit(err)
			return noRoom(limit)
		}
		return rowFailed
	}
	for _, c := range []struct {
		err  error
		want string
	}{
		{kafkago.MessageSizeTooLarge, permanent},
		{kafkago.WriteErrors{kafkago.MessageSizeTooLarge}[0], permanent},
		{kafkago.RecordListTooLarge, permanent},
		{kafkago.InvalidRecord, permanent},
		{kafkago.UnsupportedForMessageFormat, permanent},
		{kafkago.InvalidTopic, permanent},
		{kafkago.MessageTooLargeError{}, permanent},
		{kafkago.SASLAuthenticationFailed, unavailable},
		{kafkago.ClusterAuthorizationFailed, unavailable},
		{kafkago.LeaderNotAvailable, unavailable},
		{kafkago.NotLeaderForPartition, unavailable},
		{kafkago.BrokerNotAvailable, unavailable},
		{kafkago.ReplicaNotAvailable, unavailable},
		{kafkago.RequestTimedOut, unavailable},
		{kafkago.NetworkException, unavailable},
		{kafkago.KafkaStorageError, unavailable},
		{refused, unavailable},
		{io.EOF, unavailable},
		{kafkago.NotEnoughReplicas, noRoom(kafka.LimitNotEnoughReplicas)},
		{kafkago.NotEnoughReplicasAfterAppend, noRoom(kafka.LimitNotEnoughReplicas)},
		{kafkago.ThrottlingQuotaExceeded, noRoom(kafka.LimitQuota)},
		{fmt.Errorf("wrapped: %w", kafkago.TopicAuthorizationFailed), rowFailed},
		{kafkago.UnknownTopicOrPartition, rowFailed},
		{kafkago.InvalidMessage, rowFailed},
		{kafkago.InvalidTimestamp, rowFailed},
		{context.DeadlineExceeded, rowFailed},
	} {
		got := kafka.Classify(c.err)
		if got == nil {
			t.Errorf("Classify(%v) = nil", c.err)
			continue
		}
		if class := classOf(got); class != c.want {
			t.Errorf("Classify(%v) = %v: %s, want %s", c.err, got, class, c.want)
		}
		var tooLarge kafkago.MessageTooLargeError
		if !errors.As(c.err, &tooLarge) && !errors.Is(got, c.err) {
			t.Errorf("Classify(%v) lost the cause: %v", c.err, got)
		}
	}
	if kafka.Classify(nil) != nil {
		t.Error("Classify(nil) != nil")
	}
}

// TestRowHeadersNamedLikeTheRelaysAreDropped: a row header named like one
// queuebox sets (any case) is not sent and is reported by name; the
// record carries the relay's value.
func TestRowHeadersNamedLikeTheRelaysAreDropped(t *testing.T) {
	var dropped []string
	d, err := kafka.New(kafka.Options{Brokers: []string{"127.0.0.1:1"}, Topic: "t", OnDroppedHeader: func(name string) { dropped = append(dropped, name) }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	m := outbox.Message{ID: "id-1", Topic: "a.b", Payload: []byte(`{}`),
		Headers: map[string]string{"x-attempt": "7", "X-MESSAGE-ID": "forged", "x-topic": "spoofed", "tenant": "acme"}}
	rec, err := d.Record(&m)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, h := range rec.Headers {
		got[h.Key] = string(h.Value)
	}
	if len(rec.Headers) != 4 || got["X-Message-Id"] != "id-1" || got["X-Attempt"] != "0" || got["X-Topic"] != "a.b" || got["tenant"] != "acme" {
		t.Errorf("headers %v", rec.Headers)
	}
	slices.Sort(dropped)
	if !slices.Equal(dropped, []string{"X-MESSAGE-ID", "x-attempt", "x-topic"}) {
		t.Errorf("dropped %v", dropped)
	}
}
