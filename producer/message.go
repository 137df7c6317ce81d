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
	p := preparer{dialect: d, seen: make(map[string]int, len(msgs))}
	rows := make([]row, len(msgs))
	ids := make([]string, len(msgs))
	for i := range msgs {
		if err := p.row(i, &msgs[i], &rows[i]); err != nil {
			return nil, nil, err
		}
		ids[i] = rows[i].ID
	}
	if len(p.errs) > 0 {
		return nil, nil, errors.Join(p.errs...)
	}
	return rows, ids, nil
}

// preparer turns the messages of one Write call into rows for its dialect,
// collecting every validation problem instead of stopping at the first.
type preparer struct {
	dialect Dialect
	seen    map[string]int // id -> index of the message that has it
	errs    []error
}

func (p *preparer) bad(i int, field, format string, args ...any) {
	p.errs = append(p.errs, &ValidationError{Index: i, Field: field, Reason: fmt.Sprintf(format, args...)})
}

// row fills r from message i. Its error is not a validation problem: the
// Write cannot go on.
func (p *preparer) row(i int, m *Message, r *row) error {
	r.Ord = i
	if err := p.id(i, m, r); err != nil {
		return err
	}
	p.text(i, FieldTopic, m.Topic, true)
	r.Topic = m.Topic
	p.text(i, FieldKey, m.Key, false)
	if m.Key != "" {
		r.Key = &m.Key
	}
	p.text(i, FieldAggregateType, m.AggregateType, false)
	if m.AggregateType != "" {
		r.AggregateType = &m.AggregateType
	}
	p.payload(i, m, r)
	p.headers(i, m, r)
	p.schedule(i, m, r)
	p.maxAttempts(i, m, r)
	return nil
}

// id canonicalises the message's UUID, or generates a UUIDv7, and refuses
// an id that an earlier message of the call already has.
func (p *preparer) id(i int, m *Message, r *row) error {
	if m.ID == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("producer: generate id: %w", err)
		}
		r.ID = u.String()
	} else if u, err := uuid.Parse(m.ID); err != nil {
		p.bad(i, FieldID, "%q is not a UUID", m.ID)
	} else {
		r.ID = u.String()
	}
	if r.ID != "" {
		if j, dup := p.seen[r.ID]; dup {
			p.bad(i, FieldID, "%s is also the id of message %d", r.ID, j)
		}
		p.seen[r.ID] = i
	}
	return nil
}

// text checks a text column: valid UTF-8, no NUL, at most MaxTextLen
// characters as the dialect counts them.
func (p *preparer) text(i int, field, s string, required bool) {
	switch {
	case s == "" && required:
		p.bad(i, field, "is required")
	case !utf8.ValidString(s):
		p.bad(i, field, "is not valid UTF-8")
	case strings.ContainsRune(s, 0):
		p.bad(i, field, "contains a NUL character")
	case p.textLen(s) > MaxTextLen:
		p.bad(i, field, "is %d characters long, more than %d", p.textLen(s), MaxTextLen)
	}
}

// textLen is the length of s in the column's characters: UTF-16 code units
// on SQL Server, runes elsewhere.
func (p *preparer) textLen(s string) int {
	if p.dialect == SQLServer {
		return len(utf16.Encode([]rune(s)))
	}
	return utf8.RuneCountInString(s)
}

// payload sets r.Payload to the message's JSON text, in the form the
// dialect's INSERT reads.
func (p *preparer) payload(i int, m *Message, r *row) {
	switch v := m.Payload.(type) {
	case nil:
		p.bad(i, FieldPayload, "is required (use json.RawMessage(\"null\") for a JSON null)")
	case json.RawMessage:
		p.jsonText(i, v, r)
	case []byte:
		p.jsonText(i, v, r)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			p.bad(i, FieldPayload, "cannot be marshalled to JSON: %v", err)
		} else {
			r.Payload = b
		}
	}

	if p.dialect == PostgreSQL && r.Payload != nil && hasNULEscape(r.Payload) {
		// Valid JSON, but jsonb refuses it ("unsupported Unicode escape
		// sequence"): the INSERT would fail and abort the caller's
		// transaction.
		p.bad(i, FieldPayload, `holds the escape \u0000 (a NUL character), which PostgreSQL's jsonb cannot store`)
		r.Payload = nil
	}
	if p.dialect == SQLServer && r.Payload != nil {
		// OPENJSON's AS JSON yields NULL for a scalar document (42,
		// "text"), so SQL Server gets the JSON text as a JSON string
		// and reads it back verbatim as NVARCHAR(MAX).
		s, _ := json.Marshal(string(r.Payload))
		r.Payload = s
	}
}

// jsonText takes b as the payload when it is valid JSON.
func (p *preparer) jsonText(i int, b []byte, r *row) {
	if !json.Valid(b) {
		p.bad(i, FieldPayload, "is not valid JSON")
		return
	}
	r.Payload = b
}

// headers copies the message's headers, refusing names the relay sets
// itself and names or values a header cannot carry.
func (p *preparer) headers(i int, m *Message, r *row) {
	r.Headers = map[string]string{}
	for k, v := range m.Headers {
		field := fmt.Sprintf("%s[%q]", FieldHeaders, k)
		switch {
		case k == "":
			p.bad(i, FieldHeaders, "has an empty header name")
		case reservedHeader(k):
			p.bad(i, field, "is set by the relay itself (the message identity or delivery metadata)")
		case !utf8.ValidString(k) || !utf8.ValidString(v):
			p.bad(i, field, "is not valid UTF-8")
		case strings.ContainsRune(k, 0) || strings.ContainsRune(v, 0):
			p.bad(i, field, "contains a NUL character")
		case strings.ContainsAny(k, " \t\r\n:"):
			p.bad(i, field, "name contains a space, a colon or a line break")
		case strings.ContainsAny(v, "\r\n"):
			p.bad(i, field, "value contains a line break")
		}
		r.Headers[k] = v
	}
}

// schedule sets when the row becomes due: an absolute time in the
// dialect's format, or a delay from now on the database clock.
func (p *preparer) schedule(i int, m *Message, r *row) {
	switch {
	case !m.ScheduledAt.IsZero():
		var s string
		if p.dialect == SQLServer {
			// DATETIME2 (UTC) takes ISO 8601 without a zone.
			s = m.ScheduledAt.UTC().Format("2006-01-02T15:04:05.0000000")
		} else {
			s = m.ScheduledAt.Format(time.RFC3339Nano)
		}
		r.ScheduledAt = &s
	case m.Delay < 0:
		p.bad(i, FieldDelay, "is negative (%s)", m.Delay)
	default:
		if p.dialect == SQLServer {
			r.DelayS = int64(m.Delay / time.Second)
			r.DelayUS = (m.Delay % time.Second).Microseconds()
		} else {
			r.DelayUS = m.Delay.Microseconds()
		}
	}
}

// maxAttempts sets the row's attempt cap; zero leaves the table's default.
func (p *preparer) maxAttempts(i int, m *Message, r *row) {
	switch {
	case m.MaxAttempts < 0:
		p.bad(i, FieldMaxAttempts, "is negative (%d)", m.MaxAttempts)
	case m.MaxAttempts > math.MaxInt32:
		p.bad(i, FieldMaxAttempts, "is %d, more than the INTEGER column holds", m.MaxAttempts)
	case m.MaxAttempts > 0:
		r.MaxAttempts = &m.MaxAttempts
	}
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
