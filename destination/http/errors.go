package httpdest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/queuebox/queuebox/outbox"
)

// The limits NoRoom names (outbox.NoRoom): the status that said so.
const (
	LimitTooManyRequests     = "http_429"
	LimitInsufficientStorage = "http_507"
)

// StatusError is the failure of a request that got a response.
type StatusError struct {
	StatusCode int
	Location   string // for a 3xx
	text       string
}

func (e *StatusError) Error() string { return e.text }

// statusError classifies a response that is not a 2xx:
//
//	400, 410, 413, 414, 422, 431  permanent: the request itself is refused
//	401, 403                      unavailable (a credential of the whole destination)
//	408, 502, 503, 504            unavailable: the receiver, or what is in front of it, is down
//	429, 507                      no room
//	any other                     the row failed
//
// A Retry-After on a 408, 429 or 5xx is kept (outbox.RetryAfter).
func (d *Destination) statusError(resp *http.Response, target, snippet string) error {
	code := resp.StatusCode
	se := &StatusError{StatusCode: code}
	var b strings.Builder
	// The status first: it is the cause, and what a truncated last_error
	// (dead list's table) still shows.
	fmt.Fprintf(&b, "http destination %q: %s from POST %s", d.name, resp.Status, target)
	if code >= 300 && code < 400 {
		se.Location = redactURL(resp.Header.Get("Location"))
		fmt.Fprintf(&b, ": redirect to %q not followed", se.Location)
	}
	if snippet != "" {
		fmt.Fprintf(&b, ": %s", snippet)
	}
	se.text = b.String()
	var err error = se
	switch code {
	case http.StatusBadRequest, http.StatusGone, http.StatusRequestEntityTooLarge, http.StatusRequestURITooLong,
		http.StatusUnprocessableEntity, http.StatusRequestHeaderFieldsTooLarge:
		return outbox.Permanent(err)
	case http.StatusUnauthorized, http.StatusForbidden:
		return outbox.Unavailable(err)
	case http.StatusRequestTimeout, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		err = outbox.Unavailable(err)
	case http.StatusTooManyRequests:
		err = outbox.NoRoom(LimitTooManyRequests, err)
	case http.StatusInsufficientStorage:
		err = outbox.NoRoom(LimitInsufficientStorage, err)
	}
	if code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500 {
		if after, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return outbox.RetryAfter(err, min(after, d.maxRetryAfter))
		}
	}
	return err
}

// transportError classifies a request that got no response. The
// receiver could not be reached, or went away mid-request, or did not
// answer within the timeout: unavailable. The context ending is not the
// receiver's failure.
func (d *Destination) transportError(ctx, rctx context.Context, target string, err error) error {
	msg := d.redact(err.Error())
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("http destination %q: POST %s: not completed before the context ended: %w", d.name, target, ctx.Err())
	case errors.Is(rctx.Err(), context.DeadlineExceeded):
		return outbox.Unavailable(fmt.Errorf("http destination %q: POST %s: timed out after %v", d.name, target, d.timeout))
	case isDialError(err):
		return outbox.Unavailable(fmt.Errorf("http destination %q: POST %s: cannot connect: %s", d.name, target, msg))
	case isTLSError(err):
		return outbox.Unavailable(fmt.Errorf("http destination %q: POST %s: TLS: %s (check the receiver's certificate, or tls.caFile)", d.name, target, msg))
	case isConnectionLost(err):
		return outbox.Unavailable(fmt.Errorf("http destination %q: POST %s: connection lost before the response: %s", d.name, target, msg))
	default:
		return fmt.Errorf("http destination %q: POST %s: %s", d.name, target, msg)
	}
}

func isDialError(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns) || errors.Is(err, syscall.ECONNREFUSED)
}

func isTLSError(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		record   tls.RecordHeaderError
		alert    tls.AlertError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	return errors.As(err, &verify) || errors.As(err, &record) || errors.As(err, &alert) ||
		errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid)
}

// isConnectionLost reports a connection that closed under the request:
// reset, broken pipe, or closed before the response was read.
func isConnectionLost(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED)
}

// retryAfter parses a Retry-After value: delay seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	// A delay of zero or less (or a date already past, a clock skew away)
	// is no hint: honoured, it would spend the row's attempts back to
	// back. The relay's own backoff applies instead.
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0, false
		}
		if n > int64(365*24*time.Hour/time.Second) {
			n = int64(365 * 24 * time.Hour / time.Second)
		}
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d, true
		}
	}
	return 0, false
}
