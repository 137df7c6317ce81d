package nats

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/redact"
)

// The limits a message is checked against before it is published. Over
// them, the server refuses the message on every attempt; the subject
// length, worse, makes it close the connection under every other message.
const (
	// maxSubjectBytes bounds a subject so that the protocol line carrying
	// it (HPUB, the subject, the ack inbox and two sizes) fits the
	// server's default max_control_line of 4 KiB, past which the server
	// closes the connection.
	maxSubjectBytes = 4096 - 256
	// maxHeaderBytes is the largest header block JetStream stores
	// (API error 10097 above it).
	maxHeaderBytes = 64<<10 - 1
	// fileStoreMaxRecord is the largest message a file-storage stream can
	// store (subject, headers and payload, with the record's framing); a
	// larger one fails with API error 10077 like a full stream, but no
	// room ever lets it in.
	fileStoreMaxRecord = 32<<20 - 64
)

// The limits NoRoom names (outbox.NoRoom).
const (
	// A stream with discard: new at one of its limits (API error 10077).
	LimitStreamMaxMsgs           = "stream_max_msgs"
	LimitStreamMaxBytes          = "stream_max_bytes"
	LimitStreamMaxMsgsPerSubject = "stream_max_msgs_per_subject"
	// LimitStream: a stream at one of its limits, the lookup of which one
	// failed.
	LimitStream = "stream_limits"
	// LimitAccount: the account's JetStream storage or memory limit
	// (API error 10002).
	LimitAccount = "account_limits"
	// LimitServer: the server's JetStream storage or memory limit
	// (insufficient resources, API errors 10023, 10028, 10047).
	LimitServer = "server_resources"
	// LimitTooManyRequests: the stream has more publishes pending than it
	// takes in (API error 10167).
	LimitTooManyRequests = "too_many_requests"
)

// JetStream API error codes classified here (nats-server's errors.json).
const (
	errCodeAccountResourcesExceeded = 10002
	errCodeInsufficientResources    = 10023
	errCodeMemoryResourcesExceeded  = 10028
	errCodeStorageResourcesExceeded = 10047
	errCodeStreamStoreFailed        = 10077
	errCodeHeaderExceedsMaximum     = 10097
	errCodeStreamTooManyRequests    = 10167
)

// classify maps a publish or ack error onto the outbox classification, by
// error value and JetStream API code:
//
//   - permanent: a message above max_payload, the stream's max_msg_size,
//     the header limit or the file store's record limit; a header name
//     NATS cannot carry; an invalid subject.
//   - no room: a stream at its limits with discard: new, the account's or
//     the server's JetStream limits, too many pending publishes.
//   - unavailable: the connection down, no PubAck within AckTimeout, any
//     other JetStream 503; no responders when JetStream itself, or the
//     stream covering the subject, does not answer.
//   - anything else, no stream covering the subject included: the row
//     failed (retryable).
func (d *Destination) classify(err error, subj string, size int) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return d.noResponders(err, subj)
	case errors.Is(err, nats.ErrMaxPayload):
		return outbox.Permanent(fmt.Errorf("nats destination %q: message of %d bytes exceeds the server's max_payload of %d bytes: %w", d.name, size, d.nc.MaxPayload(), err))
	case errors.Is(err, nats.ErrBadHeaderMsg):
		return outbox.Permanent(fmt.Errorf("nats destination %q: a row header name is not a valid NATS header name (printable ASCII without spaces, colons or quotes): %w", d.name, err))
	case errors.Is(err, nats.ErrBadSubject):
		return outbox.Permanent(fmt.Errorf("nats destination %q: subject %q: %w", d.name, subj, err))
	case errors.As(err, &apiErr):
		return d.apiError(apiErr, err, subj, size)
	case errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrReconnectBufExceeded),
		errors.Is(err, nats.ErrConnectionDraining), errors.Is(err, nats.ErrTimeout),
		errors.Is(err, jetstream.ErrAsyncPublishTimeout), errors.Is(err, nats.ErrStaleConnection),
		errors.Is(err, jetstream.ErrTooManyStalledMsgs):
		return outbox.Unavailable(fmt.Errorf("nats destination %q: %s: %w", d.name, d.servers, err))
	default:
		return fmt.Errorf("nats destination %q: publish to %q: %w", d.name, subj, err)
	}
}

// apiError classifies a JetStream API error answering a publish.
func (d *Destination) apiError(apiErr *jetstream.APIError, err error, subj string, size int) error {
	switch code := apiErr.ErrorCode; {
	case code == jetstream.JSErrCodeStreamMessageExceedsMaximum:
		return outbox.Permanent(fmt.Errorf("nats destination %q: message of %d bytes exceeds the stream's max_msg_size (subject %q): %w", d.name, size, subj, err))
	case code == errCodeHeaderExceedsMaximum:
		return outbox.Permanent(fmt.Errorf("nats destination %q: the message's headers exceed JetStream's limit (subject %q): %w", d.name, subj, err))
	case code == errCodeStreamStoreFailed && size > fileStoreMaxRecord:
		return outbox.Permanent(fmt.Errorf("nats destination %q: message of %d bytes is larger than a file-storage stream can store (subject %q): %w", d.name, size, subj, err))
	case code == errCodeStreamStoreFailed:
		limit := d.streamLimit(subj)
		return outbox.NoRoom(limit, fmt.Errorf("nats destination %q: the stream of subject %q is full (%s, discard: new): let its consumers catch up, purge it, or raise the limit: %w", d.name, subj, limit, err))
	case code == errCodeAccountResourcesExceeded:
		return outbox.NoRoom(LimitAccount, fmt.Errorf("nats destination %q: the account's JetStream storage or memory limit is reached (subject %q): raise it, or remove old messages: %w", d.name, subj, err))
	case code == errCodeInsufficientResources, code == errCodeMemoryResourcesExceeded, code == errCodeStorageResourcesExceeded:
		return outbox.NoRoom(LimitServer, fmt.Errorf("nats destination %q: the server's JetStream storage or memory is used up (subject %q): free disk or raise max_file_store / max_memory_store: %w", d.name, subj, err))
	case code == errCodeStreamTooManyRequests:
		return outbox.NoRoom(LimitTooManyRequests, fmt.Errorf("nats destination %q: the stream of subject %q has more publishes pending than it takes in: %w", d.name, subj, err))
	case apiErr.Code == 503:
		return outbox.Unavailable(fmt.Errorf("nats destination %q: JetStream unavailable for subject %q: %w", d.name, subj, err))
	}
	return fmt.Errorf("nats destination %q: publish to %q: %w", d.name, subj, err)
}

// noResponders classifies a publish that nothing answered. Usually no
// stream covers the subject: a route to a subject without a stream, a
// problem of the rows so routed, which spend attempts (as unavailable,
// they would open the circuit for every subject of the destination, over
// and over). But when JetStream itself does not answer, or a stream does
// cover the subject, the server side is down: unavailable.
func (d *Destination) noResponders(err error, subj string) error {
	switch cause := d.lookups.get("responders:"+subj, func(ctx context.Context) string { return d.noRespondersCause(ctx, subj) }); {
	case cause == "":
		return fmt.Errorf("nats destination %q: no JetStream stream covers subject %q; create a stream that covers it, or set stream, createStream: true and streamSubjects covering it (rows that die meanwhile: queuebox replay): %w", d.name, subj, err)
	default:
		return outbox.Unavailable(fmt.Errorf("nats destination %q: no answer to a publish to %q: %s: %w", d.name, subj, cause, err))
	}
}

// noRespondersCause says why a publish to subj had no responders when the
// server side is down, and "" when no stream covers subj.
func (d *Destination) noRespondersCause(ctx context.Context, subj string) string {
	if _, err := d.js.AccountInfo(ctx); err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.Code != 503 {
			return "" // JetStream answers
		}
		return "JetStream does not answer (" + err.Error() + ")"
	}
	name, err := d.js.StreamNameBySubject(ctx, subj)
	if err == nil && name != "" {
		return "stream " + name + " covers it but does not answer (offline, or without a leader)"
	}
	return ""
}

// streamLimit names the limit a full stream of subj is at, from its
// configuration and state; LimitStream when the lookup fails.
func (d *Destination) streamLimit(subj string) string {
	return d.lookups.get("limit:"+subj, func(ctx context.Context) string {
		name, err := d.js.StreamNameBySubject(ctx, subj)
		if err != nil {
			return LimitStream
		}
		s, err := d.js.Stream(ctx, name)
		if err != nil {
			return LimitStream
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(subj))
		if err != nil {
			return LimitStream
		}
		cfg, st := info.Config, info.State
		switch {
		case cfg.MaxMsgs > 0 && st.Msgs >= uint64(cfg.MaxMsgs):
			return LimitStreamMaxMsgs
		case cfg.MaxMsgsPerSubject > 0 && st.Subjects[subj] >= uint64(cfg.MaxMsgsPerSubject):
			return LimitStreamMaxMsgsPerSubject
		case cfg.MaxBytes > 0:
			return LimitStreamMaxBytes
		}
		return LimitStream
	})
}

// lookups remembers, for a second, the answers of the JetStream requests
// that classify a failure, so that a batch whose messages fail alike asks
// once. Concurrent askers of one key wait for the first one's answer.
type lookups struct {
	mu sync.Mutex
	m  map[string]*lookup
}

type lookup struct {
	ready chan struct{}
	at    time.Time // zero while asked
	val   string
}

const (
	lookupTTL     = time.Second
	lookupTimeout = 2 * time.Second
	maxLookups    = 1024
)

func (l *lookups) get(key string, ask func(ctx context.Context) string) string {
	l.mu.Lock()
	if e, ok := l.m[key]; ok && (e.at.IsZero() || time.Since(e.at) < lookupTTL) {
		l.mu.Unlock()
		<-e.ready
		return e.val
	}
	if l.m == nil {
		l.m = map[string]*lookup{}
	}
	if len(l.m) >= maxLookups {
		for k, e := range l.m {
			if !e.at.IsZero() && time.Since(e.at) >= lookupTTL {
				delete(l.m, k)
			}
		}
	}
	e := &lookup{ready: make(chan struct{})}
	l.m[key] = e
	l.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	val := ask(ctx)
	cancel()
	l.mu.Lock()
	e.val, e.at = val, time.Now()
	l.mu.Unlock()
	close(e.ready)
	return val
}

// validSubject rejects subjects NATS cannot publish to: empty, with
// whitespace, empty tokens or wildcards, or too long for the protocol
// line. Such a row never publishes.
func validSubject(s string, secrets []string) error {
	if s == "" {
		return outbox.Permanent(errors.New("rendered subject is empty"))
	}
	if len(s) > maxSubjectBytes {
		return outbox.Permanent(fmt.Errorf("subject of %d bytes (%q) is longer than %d bytes, which the server's protocol line cannot carry", len(s), redact.Bounded(s, 32, secrets...), maxSubjectBytes))
	}
	if strings.ContainsAny(s, " \t\r\n") {
		return outbox.Permanent(fmt.Errorf("subject %q contains whitespace", s))
	}
	for tok := range strings.SplitSeq(s, ".") {
		switch tok {
		case "":
			return outbox.Permanent(fmt.Errorf("subject %q has an empty token", s))
		case "*", ">":
			return outbox.Permanent(fmt.Errorf("subject %q contains a wildcard", s))
		}
	}
	return nil
}
