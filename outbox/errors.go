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

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as a failure that no retry can fix (a payload the
// broker refuses, a 4xx that means "never"). The row goes dead at once with
// the reason kept. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or an error it wraps, was marked Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

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

type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// Unavailable marks err as a connection-level failure of the destination as a
// whole (broker down, connection refused), as opposed to a failure of one
// message. The engine releases such rows without spending an attempt when a
// destination keeps failing this way.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &unavailableError{err: err}
}

// IsUnavailable reports whether err was marked Unavailable.
func IsUnavailable(err error) bool {
	var u *unavailableError
	return errors.As(err, &u)
}

type maybeAppliedError struct{ err error }

func (e *maybeAppliedError) Error() string { return e.err.Error() }
func (e *maybeAppliedError) Unwrap() error { return e.err }

// MaybeApplied marks a database error after which the statement may have
// run and committed all the same: the connection broke, or the context
// ended, after the statement was sent. A dialect marks such errors; a
// statement that the server refused, or that was never sent, is not
// marked. MaybeApplied(nil) is nil.
func MaybeApplied(err error) error {
	if err == nil {
		return nil
	}
	return &maybeAppliedError{err: err}
}

// IsMaybeApplied reports whether err, or an error it wraps, was marked
// MaybeApplied.
func IsMaybeApplied(err error) bool {
	var m *maybeAppliedError
	return errors.As(err, &m)
}
