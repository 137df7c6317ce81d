package amqp

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/redact"
)

// The limits a message is checked against before it is written. A message
// over one of them fails in amqp091's encoder (which closes the whole
// connection, every other publisher's channel with it) or is refused by
// the broker with a connection error; checked first, it fails alone and
// permanently.
const (
	// maxShortString is the longest AMQP 0.9.1 short string: exchange
	// names, routing keys, header names and message_id are short strings.
	maxShortString = 255
	// defaultFrameMax is RabbitMQ's default frame_max, used until a
	// connection has negotiated the broker's own.
	defaultFrameMax = 131072
)

// The limits NoRoom names (outbox.NoRoom).
const (
	// LimitResourceAlarm: the broker blocks publishers (connection.blocked),
	// during a memory or disk alarm.
	LimitResourceAlarm = "resource_alarm"
	// LimitQueueFull: the broker nacked the message, as a queue at its
	// x-max-length or x-max-length-bytes with x-overflow: reject-publish
	// does.
	LimitQueueFull = "queue_full"
)

// checkAddress reports an exchange or routing key that AMQP cannot carry.
func checkAddress(a addr, secrets []string) error {
	switch {
	case len(a.exchange) > maxShortString:
		return outbox.Permanent(fmt.Errorf("amqp: exchange name of %d bytes (%s) is longer than AMQP's %d-byte limit for names",
			len(a.exchange), prefix(a.exchange, secrets), maxShortString))
	case len(a.key) > maxShortString:
		return outbox.Permanent(fmt.Errorf("amqp: routing key of %d bytes (%s) is longer than AMQP's %d-byte limit for routing keys",
			len(a.key), prefix(a.key, secrets), maxShortString))
	}
	return nil
}

// checkProperties reports properties that AMQP cannot carry: a header name
// or message_id longer than a short string, or a content header (the
// properties and every header) larger than the connection's frame_max,
// which must hold it in one frame.
func checkProperties(p *amqp.Publishing, frameMax int, secrets []string) error {
	if len(p.MessageId) > maxShortString {
		return outbox.Permanent(fmt.Errorf("amqp: message id of %d bytes is longer than AMQP's %d-byte limit", len(p.MessageId), maxShortString))
	}
	for k := range p.Headers {
		if len(k) > maxShortString {
			return outbox.Permanent(fmt.Errorf("amqp: header name of %d bytes (%s) is longer than AMQP's %d-byte limit for header names",
				len(k), prefix(k, secrets), maxShortString))
		}
	}
	if n := contentHeaderFrameSize(p); frameMax > 0 && n > frameMax {
		return outbox.Permanent(fmt.Errorf("amqp: the message's properties and headers take %d bytes, more than the broker's frame_max of %d bytes, which must hold them in one frame (send fewer or smaller row headers)",
			n, frameMax))
	}
	return nil
}

// contentHeaderFrameSize is the size of the content header frame amqp091
// writes for p: frame header (7), class, weight and body size (12), the
// property flags (2), the properties set, and the frame end (1). Only the
// properties and header value types Properties uses are counted exactly;
// any other value type counts as a long string of its printed form.
func contentHeaderFrameSize(p *amqp.Publishing) int {
	n := 7 + 12 + 2 + 1
	short := func(s string) {
		if s != "" {
			n += 1 + len(s)
		}
	}
	short(p.ContentType)
	short(p.ContentEncoding)
	short(p.CorrelationId)
	short(p.ReplyTo)
	short(p.Expiration)
	short(p.MessageId)
	short(p.Type)
	short(p.UserId)
	short(p.AppId)
	if p.DeliveryMode > 0 {
		n++
	}
	if p.Priority > 0 {
		n++
	}
	if !p.Timestamp.IsZero() {
		n += 8
	}
	if len(p.Headers) > 0 {
		n += 4
		for k, v := range p.Headers {
			n += 1 + len(k)
			switch v := v.(type) {
			case string:
				n += 1 + 4 + len(v)
			case int64:
				n += 1 + 8
			default:
				n += 1 + 4 + len(fmt.Sprint(v))
			}
		}
	}
	return n
}

// prefix quotes the start of s, for errors about a value too long to
// show, redacted before it is cut.
func prefix(s string, secrets []string) string {
	return fmt.Sprintf("%q", redact.Bounded(s, 32, secrets...))
}

// exchangeError classifies the failure of an exchange's declaration or
// passive check.
func (d *Destination) exchangeError(ex string, e *amqp.Error) error {
	var err error
	switch e.Code {
	case amqp.NotFound:
		err = fmt.Errorf("amqp: exchange %q does not exist (declare it, or set declareExchange: true): %w", ex, e)
	case amqp.PreconditionFailed:
		err = fmt.Errorf("amqp: exchange %q exists with other settings than type %q, durable: %w", ex, d.opts.ExchangeType, e)
	case amqp.AccessRefused:
		err = fmt.Errorf("amqp: access to exchange %q refused: %w", ex, e)
	default:
		err = fmt.Errorf("amqp: exchange %q: %w", ex, e)
	}
	return exchangeFailure{err}
}

// exchangeFailure marks the error of a message whose exchange failed its
// check before anything was published: it failed on its own, so Publish
// does not publish it again to narrow a refusal down (isolate).
type exchangeFailure struct{ error }

func (e exchangeFailure) Unwrap() error { return e.error }

// channelClosed classifies the reason a channel was closed mid-batch.
func (d *Destination) channelClosed(e *amqp.Error) error {
	if !isChannelLevel(e) {
		return outbox.Unavailable(fmt.Errorf("amqp %s: connection lost before the publisher confirm: %w", d.redacted, e))
	}
	if e.Code == amqp.NotFound {
		return fmt.Errorf("amqp: channel closed by the broker, exchange missing? (declare it, or set declareExchange: true): %w", e)
	}
	return fmt.Errorf("amqp: channel closed by the broker before the publisher confirm: %w", e)
}

// refusedAlone classifies the error of a message that was the only one
// written on its channel, which the broker closed under it: the refusal is
// that message's. A 406 PRECONDITION_FAILED on basic.publish refuses the
// message itself (above the broker's max_message_size, or content the
// broker cannot parse: Properties sets no expiration, user_id or reply_to,
// the other causes of a 406 there), so no retry can pass it. Other
// refusals (403 for an internal exchange or a missing write permission)
// are the configuration's, and stay retryable.
func refusedAlone(err error) error {
	var (
		aerr *amqp.Error
		xerr exchangeFailure
	)
	if errors.As(err, &aerr) && aerr.Code == amqp.PreconditionFailed && isChannelLevel(aerr) && !errors.As(err, &xerr) && !outbox.IsPermanent(err) {
		return outbox.Permanent(fmt.Errorf("amqp: the broker refuses this message (above its max_message_size, or content it cannot parse): %w", err))
	}
	return err
}

// isChannelClosed reports whether err is a channel closed by the broker
// (a soft error: the connection stays usable) under a message.
func isChannelClosed(err error) bool {
	var (
		aerr *amqp.Error
		xerr exchangeFailure
	)
	return err != nil && !outbox.IsUnavailable(err) && !outbox.IsPermanent(err) && !errors.As(err, &xerr) && errors.As(err, &aerr) && isChannelLevel(aerr)
}

// isChannelLevel reports whether e closes one channel only (the connection
// stays usable): the soft errors of AMQP 0.9.1.
func isChannelLevel(e *amqp.Error) bool {
	switch e.Code {
	case amqp.ContentTooLarge, amqp.NoRoute, amqp.NoConsumers, amqp.AccessRefused,
		amqp.NotFound, amqp.ResourceLocked, amqp.PreconditionFailed:
		return e.Server
	}
	return false
}

// classifyConnErr marks connection-level failures Unavailable.
func classifyConnErr(err error) error {
	var aerr *amqp.Error
	if errors.As(err, &aerr) && isChannelLevel(aerr) {
		return err
	}
	// The connection is gone (amqp.ErrClosed, a hard error, a network
	// error): the destination as a whole is unavailable.
	return outbox.Unavailable(err)
}
