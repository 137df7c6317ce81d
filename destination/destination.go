// Package destination defines what the relay needs from a broker or a
// receiver: publish a batch of messages and say, per message, whether it was
// accepted. Each adapter lives in its own package with one client library
// and its own error classification onto outbox.Permanent, outbox.Unavailable
// and outbox.RetryAfter.
package destination

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/queuebox/queuebox/outbox"
)

// Destination publishes messages to one configured target.
//
// Publish delivers msgs and returns nil when every message was accepted, a
// *BatchError when some were not, or any other error when none was. The
// message body is msg.Payload; its identity is msg.ID, sent in the
// protocol's identity header. Publish must honour ctx: when it ends, the
// outcome of unacknowledged messages is a failure.
type Destination interface {
	Publish(ctx context.Context, msgs []outbox.Message) error
	Close() error
}

// Streamer is implemented by destinations that can report the outcome of
// each message as soon as it is known, instead of once the whole batch is
// done. The engine settles a row, and frees its share of the in-flight
// budget, when done is called for it: a slow message then holds only
// itself. PublishEach calls done exactly once for every index of msgs, from
// any goroutine, and returns after the last call. The errors follow
// Publish's classification.
type Streamer interface {
	PublishEach(ctx context.Context, msgs []outbox.Message, done func(i int, err error))
}

// Checker is implemented by destinations that can tell whether their target
// is reachable without sending a message (queuebox check, /health/ready).
type Checker interface {
	Check(ctx context.Context) error
}

// BatchError reports the outcome of each message of a batch: Errs has one
// entry per message, nil for a message that was accepted.
type BatchError struct {
	Errs []error
}

func (e *BatchError) Error() string {
	var n int
	var first error
	for _, err := range e.Errs {
		if err != nil {
			if first == nil {
				first = err
			}
			n++
		}
	}
	if first == nil {
		return "destination: batch error with no failures"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d messages failed", n, len(e.Errs))
	b.WriteString(": ")
	b.WriteString(first.Error())
	return b.String()
}

// ErrorAt returns the outcome of message i of a batch whose Publish returned
// err: nil when it was accepted. A *BatchError that has no entry for i (an
// adapter's mistake) reports i failed, retryably: a message is never taken
// as sent without an answer for it.
func ErrorAt(err error, i int) error {
	if err == nil {
		return nil
	}
	var be *BatchError
	if errors.As(err, &be) {
		if i >= 0 && i < len(be.Errs) {
			return be.Errs[i]
		}
		return fmt.Errorf("destination: no outcome for message %d of the batch (the batch error has %d)", i, len(be.Errs))
	}
	return err
}

// NewBatchError returns nil when every entry of errs is nil, and a
// *BatchError otherwise.
func NewBatchError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return &BatchError{Errs: errs}
		}
	}
	return nil
}
