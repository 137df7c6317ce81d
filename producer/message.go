package producer

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Message is one message to write to the outbox.
type Message struct {
	// ID is the message identity. Empty: a UUIDv7 is generated. Otherwise
	// it must be a UUID; it is stored and returned in canonical form.
	ID string
	// Topic routes the message (required, at most 255 characters).
	Topic string
	// Key is the ordering unit: messages sharing a non-empty key are
	// delivered in write order (at most 255 characters). Empty: no order.
	Key string
	// Payload is the message body. A json.RawMessage or []byte is taken as
	// JSON text and must be valid; anything else is passed to json.Marshal.
	// A nil Payload is refused: write json.RawMessage("null") to mean null.
	Payload any
	// Headers are added to every delivery. Names must be non-empty and may
	// not be one of the headers the relay sets itself (ReservedHeaders).
	Headers map[string]string
	// AggregateType is optional (at most 255 characters).
	AggregateType string
	// ScheduledAt delays delivery until that instant. Zero: Delay after
	// now on the database clock (now when Delay is zero too).
	ScheduledAt time.Time
	// Delay delays delivery by this much from now on the database clock.
	// Ignored when ScheduledAt is set; must not be negative.
	Delay time.Duration
	// MaxAttempts caps delivery attempts for this row. 0: the table's
	// default.
	MaxAttempts int
}

// Field names used in ValidationError.Field.
const (
	FieldID            = "id"
	FieldTopic         = "topic"
	FieldKey           = "key"
	FieldPayload       = "payload"
	FieldHeaders       = "headers"
	FieldAggregateType = "aggregateType"
	FieldScheduledAt   = "scheduledAt"
	FieldDelay         = "delay"
	FieldMaxAttempts   = "maxAttempts"
)

// MaxTextLen is the longest topic, key or aggregate type, in characters:
// the columns are VARCHAR(255) (NVARCHAR(255) on SQL Server, where a
// character outside the Basic Multilingual Plane counts twice).
const MaxTextLen = 255

// ValidationError reports a message that was refused before the database
// was touched. Write returns every problem found, joined with errors.Join;
// errors.As finds the first.
type ValidationError struct {
	Index  int    // position of the message in the Write call
	Field  string // one of the Field* constants; headers name the header: headers["X"]
	Reason string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("producer: message %d: %s: %s", e.Index, e.Field, e.Reason)
}

// ErrNoTransaction is returned when Write is given a nil transaction.
var ErrNoTransaction = errors.New("producer: nil transaction")

// ReservedHeaders are the headers the relay sets on deliveries itself:
// the identity headers and the delivery metadata. A row
// header with one of these names (compared case-insensitively) would never
// reach a consumer, so Write refuses it instead of dropping it silently.
var ReservedHeaders = []string{
	"Nats-Msg-Id", "X-Message-Id", "Idempotency-Key", "X-Topic", "X-Attempt", "X-Message-Key",
}

func reservedHeader(name string) bool {
	for _, r := range ReservedHeaders {
		if strings.EqualFold(name, r) {
			return true
		}
	}
	return false
}

// row is a validated message as it travels in the statement's JSON array.
type row struct {
	Ord           int               `json:"ord"`
	ID            string            `json:"id"`
	Topic         string            `json:"topic"`
	Key           *string           `json:"key"`
	Payload       json.RawMessage   `json:"payload"`
	Headers       map[string]string `json:"headers"`
	AggregateType *string           `json:"aggregate_type"`
	ScheduledAt   *string           `json:"scheduled_at"`
	DelayUS       int64             `json:"delay_us"`
	DelayS        int64             `json:"delay_s"` // SQL Server: whole seconds, DelayUS the rest
	MaxAttempts   *int              `json:"max_attempts"`
}

// prepare validates msgs and turns them into rows, generating ids. It
// returns every validation problem at once.
func prepare(msgs []Message, d Dialect) ([]row, []string, error) {
	rows := make([]row, len(msgs))
	ids := make([]string, len(msgs))
	seen := make(map[string]int, len(msgs))
	var errs []error
	bad := func(i int, field, format string, args ...any) {
		errs = append(errs, &ValidationError{Index: i, Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	textLen := func(s string) int {
		if d == SQLServer {
			return len(utf16.Encode([]rune(s)))
		}
		return utf8.RuneCountInString(s)
	}
	checkText := func(i int, field, s string, required bool) {
		switch {
		case s == "" && required:
			bad(i, field, "is required")
		case !utf8.ValidString(s):
			bad(i, field, "is not valid UTF-8")
		case strings.ContainsRune(s, 0):
			bad(i, field, "contains a NUL character")
		case textLen(s) > MaxTextLen:
			bad(i, field, "is %d characters long, more than %d", textLen(s), MaxTextLen)
		}
	}
	for i := range msgs {
		m := &msgs[i]
		r := &rows[i]
		r.Ord = i

		if m.ID == "" {
			u, err := uuid.NewV7()
			if err != nil {
				return nil, nil, fmt.Errorf("producer: generate id: %w", err)
			}
			r.ID = u.String()
		} else if u, err := uuid.Parse(m.ID); err != nil {
			bad(i, FieldID, "%q is not a UUID", m.ID)
		} else {
			r.ID = u.String()
		}
		if r.ID != "" {
			if j, dup := seen[r.ID]; dup {
				bad(i, FieldID, "%s is also the id of message %d", r.ID, j)
			}
			seen[r.ID] = i
		}
		ids[i] = r.ID

		checkText(i, FieldTopic, m.Topic, true)
		r.Topic = m.Topic
		checkText(i, FieldKey, m.Key, false)
		if m.Key != "" {
			r.Key = &m.Key
		}
		checkText(i, FieldAggregateType, m.AggregateType, false)
		if m.AggregateType != "" {
			r.AggregateType = &m.AggregateType
		}

		switch p := m.Payload.(type) {
		case nil:
			bad(i, FieldPayload, "is required (use json.RawMessage(\"null\") for a JSON null)")
		case json.RawMessage:
			if !json.Valid(p) {
				bad(i, FieldPayload, "is not valid JSON")
			} else {
				r.Payload = p
			}
		case []byte:
			if !json.Valid(p) {
				bad(i, FieldPayload, "is not valid JSON")
			} else {
				r.Payload = p
			}
		default:
			b, err := json.Marshal(p)
			if err != nil {
				bad(i, FieldPayload, "cannot be marshalled to JSON: %v", err)
			} else {
				r.Payload = b
			}
		}

		if d == PostgreSQL && r.Payload != nil && hasNULEscape(r.Payload) {
			// Valid JSON, but jsonb refuses it ("unsupported Unicode escape
			// sequence"): the INSERT would fail and abort the caller's
			// transaction.
			bad(i, FieldPayload, `holds the escape \u0000 (a NUL character), which PostgreSQL's jsonb cannot store`)
			r.Payload = nil
		}
		if d == SQLServer && r.Payload != nil {
			// OPENJSON's AS JSON yields NULL for a scalar document (42,
			// "text"), so SQL Server gets the JSON text as a JSON string
			// and reads it back verbatim as NVARCHAR(MAX).
			s, _ := json.Marshal(string(r.Payload))
			r.Payload = s
		}

		r.Headers = map[string]string{}
		for k, v := range m.Headers {
			field := fmt.Sprintf("%s[%q]", FieldHeaders, k)
			switch {
			case k == "":
				bad(i, FieldHeaders, "has an empty header name")
			case reservedHeader(k):
				bad(i, field, "is set by the relay itself (the message identity or delivery metadata)")
			case !utf8.ValidString(k) || !utf8.ValidString(v):
				bad(i, field, "is not valid UTF-8")
			case strings.ContainsRune(k, 0) || strings.ContainsRune(v, 0):
				bad(i, field, "contains a NUL character")
			case strings.ContainsAny(k, " \t\r\n:"):
				bad(i, field, "name contains a space, a colon or a line break")
			case strings.ContainsAny(v, "\r\n"):
				bad(i, field, "value contains a line break")
			}
			r.Headers[k] = v
		}

		switch {
		case !m.ScheduledAt.IsZero():
			var s string
			if d == SQLServer {
				// DATETIME2 (UTC) takes ISO 8601 without a zone.
				s = m.ScheduledAt.UTC().Format("2006-01-02T15:04:05.0000000")
			} else {
				s = m.ScheduledAt.Format(time.RFC3339Nano)
			}
			r.ScheduledAt = &s
		case m.Delay < 0:
			bad(i, FieldDelay, "is negative (%s)", m.Delay)
		default:
			if d == SQLServer {
				r.DelayS = int64(m.Delay / time.Second)
				r.DelayUS = (m.Delay % time.Second).Microseconds()
			} else {
				r.DelayUS = m.Delay.Microseconds()
			}
		}

		switch {
		case m.MaxAttempts < 0:
			bad(i, FieldMaxAttempts, "is negative (%d)", m.MaxAttempts)
		case m.MaxAttempts > math.MaxInt32:
			bad(i, FieldMaxAttempts, "is %d, more than the INTEGER column holds", m.MaxAttempts)
		case m.MaxAttempts > 0:
			r.MaxAttempts = &m.MaxAttempts
		}
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	return rows, ids, nil
}

// hasNULEscape reports whether JSON text b holds the escape \u0000 (a
// backslash that is not itself escaped, then u0000).
func hasNULEscape(b []byte) bool {
	for i := 0; i+5 < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if b[i+1] == 'u' && string(b[i+2:i+6]) == "0000" {
			return true
		}
		i++ // skip the escaped character (\\ included)
	}
	return false
}
