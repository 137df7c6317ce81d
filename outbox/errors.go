package outbox

import (
	"errors"
	"time"
)

// ErrLeaseLost reports that a fenced write matched no row: the lease expired
// or another relay claimed the row since. It is counted and logged, never
// retried.
var ErrLeaseLost = errors.New("outbox: claim lost (lease expired or row reclaimed)")

// ErrNoRoute reports a row whose topic matches no configured route.
var ErrNoRoute = errors.New("no route matches the topic")

// marked is err with a mark of kind K (one of the empty types below): it
// reads and unwraps as err, and errors.As finds the mark through any
// wrapping.
type marked[K any] struct{ err error }

func (e *marked[K]) Error() string { return e.err.Error() }
func (e *marked[K]) Unwrap() error { return e.err }

// mark marks err with kind K; mark(nil) is nil.
func mark[K any](err error) error {
	if err == nil {
		return nil
	}
	return &marked[K]{err: err}
}

// hasMark reports whether err, or an error it wraps, was marked with K.
func hasMark[K any](err error) bool {
	var m *marked[K]
	return errors.As(err, &m)
}

// The kinds of mark.
type (
	permanentMark    struct{}
	unavailableMark  struct{}
	maybeAppliedMark struct{}
)

// Permanent marks err as a failure that no retry can fix (a payload the
// broker refuses, a 4xx that means "never"). The row goes dead at once with
// the reason kept. Permanent(nil) is nil.
func Permanent(err error) error { return mark[permanentMark](err) }

// IsPermanent reports whether err, or an error it wraps, was marked Permanent.
func IsPermanent(err error) bool { return hasMark[permanentMark](err) }

// IsRetryable reports whether a delivery that failed with err may succeed
// later. Every non-nil error that is not Permanent is retryable: an unknown
// failure spends an attempt rather than losing the row.
func IsRetryable(err error) bool {
	return err != nil && !IsPermanent(err)
}

type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter attaches the receiver's requested delay (an HTTP Retry-After,
// say) to a retryable error. The engine uses it instead of its own backoff,
// capped by the configured maximum.
func RetryAfter(err error, after time.Duration) error {
	if err == nil {
		return nil
	}
	return &retryAfterError{err: err, after: after}
}

// RetryDelay returns the delay attached by RetryAfter, if any.
func RetryDelay(err error) (time.Duration, bool) {
	var r *retryAfterError
	if errors.As(err, &r) {
		return r.after, true
	}
	return 0, false
}

// Unavailable marks err as a connection-level failure of the destination as a
// whole (broker down, connection refused), as opposed to a failure of one
// message. The engine releases such rows without spending an attempt when a
// destination keeps failing this way.
func Unavailable(err error) error { return mark[unavailableMark](err) }

// IsUnavailable reports whether err was marked Unavailable.
func IsUnavailable(err error) bool { return hasMark[unavailableMark](err) }

// noRoomError is a failure that says the destination is up but has no room
// for the message now: a storage or rate limit, a memory or disk alarm.
type noRoomError struct {
	err   error
	limit string
}

func (e *noRoomError) Error() string { return e.err.Error() }
func (e *noRoomError) Unwrap() error { return e.err }

// NoRoom marks err as back-pressure: the destination is reachable but has no
// room now (a JetStream stream or account limit, a RabbitMQ memory or disk
// alarm, a Kafka quota, an HTTP 429 or 507). The row waits without spending
// an attempt and the destination pauses until room returns. limit names the
// limit for metrics and logs, from a fixed set per destination ("max_msgs",
// "memory_alarm", "http_429"): it must not carry row data. NoRoom(_, nil) is
// nil.
func NoRoom(limit string, err error) error {
	if err == nil {
		return nil
	}
	return &noRoomError{err: err, limit: limit}
}

// NoRoomLimit reports whether err, or an error it wraps, was marked NoRoom,
// and the limit it names.
func NoRoomLimit(err error) (limit string, ok bool) {
	var n *noRoomError
	if errors.As(err, &n) {
		return n.limit, true
	}
	return "", false
}

// IsNoRoom reports whether err, or an error it wraps, was marked NoRoom.
func IsNoRoom(err error) bool {
	_, ok := NoRoomLimit(err)
	return ok
}

// MaybeApplied marks a database error after which the statement may have
// run and committed all the same: the connection broke, or the context
// ended, after the statement was sent. A dialect marks such errors; a
// statement that the server refused, or that was never sent, is not
// marked. MaybeApplied(nil) is nil.
func MaybeApplied(err error) error { return mark[maybeAppliedMark](err) }

// IsMaybeApplied reports whether err, or an error it wraps, was marked
// MaybeApplied.
func IsMaybeApplied(err error) bool { return hasMark[maybeAppliedMark](err) }
