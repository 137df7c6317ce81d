package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/queuebox/queuebox/outbox"
)

// The limits NoRoom names (outbox.NoRoom).
const (
	// LimitNotEnoughReplicas: fewer in-sync replicas than the topic's
	// min.insync.replicas (NOT_ENOUGH_REPLICAS, and
	// NOT_ENOUGH_REPLICAS_AFTER_APPEND when the leader wrote the record
	// but could not have it replicated).
	LimitNotEnoughReplicas = "not_enough_replicas"
	// LimitQuota: a quota refused the request (THROTTLING_QUOTA_EXCEEDED).
	LimitQuota = "quota"
)

// Classify maps an error returned by kafka-go onto the outbox vocabulary, by
// Kafka error code and Go error type, never by message text:
//
//   - Permanent (the row goes dead with the reason): MessageSizeTooLarge,
//     RecordListTooLarge, InvalidRecord, UnsupportedForMessageFormat,
//     InvalidTopic, and a record refused by the client because it is
//     larger than BatchBytes.
//   - Unavailable (the cluster, or the leader of the record's partition,
//     cannot take it; the engine pauses the destination instead of
//     spending attempts): network errors (connection refused, reset,
//     timeouts, DNS, EOF), SASL authentication failures,
//     ClusterAuthorizationFailed, and, once kafka-go's own retries are
//     spent, LeaderNotAvailable, NotLeaderForPartition, BrokerNotAvailable,
//     ReplicaNotAvailable, RequestTimedOut, NetworkException and
//     KafkaStorageError.
//   - NoRoom (the cluster is up but cannot take the record now):
//     NotEnoughReplicas and NotEnoughReplicasAfterAppend
//     (LimitNotEnoughReplicas), ThrottlingQuotaExceeded (LimitQuota).
//   - Retryable, everything else, UnknownTopicOrPartition and
//     TopicAuthorizationFailed included. A missing topic, or a topic the
//     relay may not write to yet (its ACL not granted), is a configuration
//     problem, not a property of the row: it is retried with backoff and a
//     clear message, so that rows keep their remaining attempts for the
//     time someone takes to fix it.
//
// Classify(nil) is nil.
func Classify(err error) error {
	if err == nil {
		return nil
	}
	if outbox.IsPermanent(err) || outbox.IsUnavailable(err) || outbox.IsNoRoom(err) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var tooLarge kafkago.MessageTooLargeError
	if errors.As(err, &tooLarge) {
		return outbox.Permanent(fmt.Errorf("kafka: record larger than the writer's batch bytes: %w", err))
	}
	var kerr kafkago.Error
	if errors.As(err, &kerr) {
		switch kerr {
		case kafkago.MessageSizeTooLarge, kafkago.RecordListTooLarge, kafkago.InvalidRecord,
			kafkago.UnsupportedForMessageFormat, kafkago.InvalidTopic:
			return outbox.Permanent(fmt.Errorf("kafka: %w", err))
		case kafkago.SASLAuthenticationFailed, kafkago.UnsupportedSASLMechanism, kafkago.IllegalSASLState,
			kafkago.ClusterAuthorizationFailed:
			return outbox.Unavailable(fmt.Errorf("kafka: %w", err))
		case kafkago.LeaderNotAvailable, kafkago.NotLeaderForPartition, kafkago.BrokerNotAvailable,
			kafkago.ReplicaNotAvailable, kafkago.RequestTimedOut, kafkago.NetworkException, kafkago.KafkaStorageError:
			return outbox.Unavailable(fmt.Errorf("kafka: the partition's leader cannot take the record now: %w", err))
		case kafkago.NotEnoughReplicas, kafkago.NotEnoughReplicasAfterAppend:
			return outbox.NoRoom(LimitNotEnoughReplicas, fmt.Errorf("kafka: fewer in-sync replicas than the topic's min.insync.replicas (bring the brokers back, or lower min.insync.replicas): %w", err))
		case kafkago.ThrottlingQuotaExceeded:
			return outbox.NoRoom(LimitQuota, fmt.Errorf("kafka: a quota refuses the relay's requests (raise the client's quota): %w", err))
		case kafkago.UnknownTopicOrPartition:
			return fmt.Errorf("kafka: topic does not exist (create it, or set createTopics: true): %w", err)
		case kafkago.TopicAuthorizationFailed:
			return fmt.Errorf("kafka: not authorized to write to the topic (grant the relay's principal WRITE on it): %w", err)
		}
		return fmt.Errorf("kafka: %w", err)
	}
	if isNetwork(err) {
		return outbox.Unavailable(fmt.Errorf("kafka: broker unreachable: %w", err))
	}
	return err
}

// maxTopicName is the longest topic name Kafka accepts.
const maxTopicName = 249

// checkTopic reports a topic name Kafka refuses: longer than 249
// characters, "." or "..", or with a character other than ASCII letters,
// digits, '.', '_' and '-'.
func checkTopic(topic string) error {
	if len(topic) > maxTopicName {
		return outbox.Permanent(fmt.Errorf("kafka: topic name of %d characters is longer than Kafka's %d", len(topic), maxTopicName))
	}
	if topic == "." || topic == ".." {
		return outbox.Permanent(fmt.Errorf("kafka: topic name %q is not allowed", topic))
	}
	for _, c := range topic {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return outbox.Permanent(fmt.Errorf("kafka: topic name %q has %q: Kafka allows ASCII letters, digits, '.', '_' and '-'", topic, c))
		}
	}
	return nil
}

func isNetwork(err error) bool {
	var ne net.Error
	var op *net.OpError
	var dns *net.DNSError
	switch {
	case errors.As(err, &op), errors.As(err, &dns), errors.As(err, &ne):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return true
	}
	return false
}
