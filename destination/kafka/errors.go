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

// Classify maps an error returned by kafka-go onto the outbox vocabulary, by
// Kafka error code and Go error type, never by message text:
//
//   - Permanent (the row goes dead with the reason): MessageSizeTooLarge,
//     RecordListTooLarge, InvalidRecord, UnsupportedForMessageFormat,
//     InvalidTopic, and a record refused by the client because it is
//     larger than BatchBytes.
//   - Unavailable (the cluster as a whole is unreachable or refuses us; the
//     engine pauses the destination instead of spending attempts): network
//     errors (connection refused, reset, timeouts, DNS, EOF), SASL
//     authentication failures and ClusterAuthorizationFailed.
//   - Retryable, everything else, including every code kafka-go reports as
//     Temporary (leader elections, NotEnoughReplicas, request timeouts) and
//     UnknownTopicOrPartition and TopicAuthorizationFailed. A missing
//     topic, or a topic the relay may not write to yet (its ACL not granted),
//     is a configuration problem, not a property of the row: it is retried
//     with backoff and a clear message, so that rows keep their remaining
//     attempts for the time someone takes to fix it.
//
// Classify(nil) is nil.
func Classify(err error) error {
	if err == nil {
		return nil
	}
	if outbox.IsPermanent(err) || outbox.IsUnavailable(err) {
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
