package kafka_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/destination/kafka"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
)

// className is the class of a Publish outcome as the engine reads it.
func className(err error) string {
	switch {
	case err == nil:
		return "accepted"
	case outbox.IsPermanent(err):
		return "permanent"
	case outbox.IsUnavailable(err):
		return "unavailable"
	case outbox.IsNoRoom(err):
		limit, _ := outbox.NoRoomLimit(err)
		return "no room " + limit
	}
	return "row failed"
}

// TestBrokerErrorCodes: each error code a broker answers a produce with
// lands in its class. The code is injected (a kfake fault) for one topic
// only: the records of the batch bound for another topic are delivered;
// once the broker answers again, the faulted topic takes records again on
// the same destination.
func TestBrokerErrorCodes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		code *kerr.Error
		want string
	}{
		{kerr.NotEnoughReplicas, "no room " + kafka.LimitNotEnoughReplicas},
		{kerr.NotEnoughReplicasAfterAppend, "no room " + kafka.LimitNotEnoughReplicas},
		{kerr.ThrottlingQuotaExceeded, "no room " + kafka.LimitQuota},
		{kerr.LeaderNotAvailable, "unavailable"},
		{kerr.NotLeaderForPartition, "unavailable"},
		{kerr.RequestTimedOut, "unavailable"},
		{kerr.KafkaStorageError, "unavailable"},
		{kerr.MessageTooLarge, "permanent"},
		{kerr.RecordListTooLarge, "permanent"},
		{kerr.InvalidRecord, "permanent"},
		{kerr.CorruptMessage, "row failed"},
		{kerr.InvalidTimestamp, "row failed"},
		{kerr.TopicAuthorizationFailed, "row failed"},
	} {
		t.Run(c.code.Message, func(t *testing.T) {
			t.Parallel()
			good, faulted := testenv.KafkaTopicName(t, "good"), testenv.KafkaTopicName(t, "faulted")
			k := testenv.Kafka(t, []testenv.KafkaTopic{{Name: good, Partitions: 1}, {Name: faulted, Partitions: 1}})
			if k.Fake == nil {
				t.Skip("error codes are injected on the in-process cluster only")
			}
			fault := k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: faulted, Err: c.code, Count: -1})
			d := newDest(t, kafka.Options{Brokers: k.Brokers, Topic: "{{ aggregateType }}", MaxAttempts: 2})
			ctx := testenv.Context(t, 30*time.Second)
			batch := []outbox.Message{msg(1, "t", "a"), msg(2, "t", "b"), msg(3, "t", "c")}
			batch[0].AggregateType, batch[1].AggregateType, batch[2].AggregateType = good, faulted, good

			err := d.Publish(ctx, batch)
			if got := className(destination.ErrorAt(err, 1)); got != c.want {
				t.Errorf("%s: %s (%v); want %s", c.code.Message, got, destination.ErrorAt(err, 1), c.want)
			}
			if e := destination.ErrorAt(err, 1); e != nil && !errors.Is(e, kafkago.Error(c.code.Code)) {
				t.Errorf("the error does not carry the broker's code: %v", e)
			}
			for _, i := range []int{0, 2} {
				if e := destination.ErrorAt(err, i); e != nil {
					t.Errorf("record %d to the other topic: %v", i, e)
				}
			}
			if got := testenv.KafkaConsume(t, k.Brokers, 2, 10*time.Second, good); len(got) != 2 {
				t.Errorf("consumed %d records of the other topic, want 2", len(got))
			}

			fault.Remove()
			again := msg(4, "t", "d")
			again.AggregateType = faulted
			if err := d.Publish(ctx, []outbox.Message{again}); err != nil {
				t.Fatalf("Publish once the broker answers again: %v", err)
			}
		})
	}
}

// TestTopicKafkaRefusesIsPermanent: a rendered topic name Kafka refuses
// (a character outside [a-zA-Z0-9._-], longer than 249) fails its record
// permanently before any request; the others are delivered.
func TestTopicKafkaRefusesIsPermanent(t *testing.T) {
	t.Parallel()
	good := testenv.KafkaTopicName(t, "good")
	k := testenv.Kafka(t, []testenv.KafkaTopic{{Name: good, Partitions: 1}})
	d := newDest(t, kafka.Options{Brokers: k.Brokers, Topic: "{{ aggregateType }}"})
	batch := []outbox.Message{msg(1, "t", "a"), msg(2, "t", "b"), msg(3, "t", "c"), msg(4, "t", "d")}
	batch[0].AggregateType, batch[1].AggregateType, batch[2].AggregateType, batch[3].AggregateType =
		good, "orders/eu", strings.Repeat("t", 250), good
	err := d.Publish(testenv.Context(t, 20*time.Second), batch)
	for i, want := range []string{"accepted", "permanent", "permanent", "accepted"} {
		if got := className(destination.ErrorAt(err, i)); got != want {
			t.Errorf("record %d (topic %.20q): %s (%v); want %s", i, batch[i].AggregateType, got, destination.ErrorAt(err, i), want)
		}
	}
	if got := testenv.KafkaConsume(t, k.Brokers, 2, 10*time.Second, good); len(got) != 2 {
		t.Errorf("consumed %d records, want 2", len(got))
	}
}
