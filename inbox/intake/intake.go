// Package intake holds what every way into the inbox shares: where a
// message's idempotency key and order key come from (a header or a JSON
// path), the topic template, and which received headers are stored.
// It imports no driver: the HTTP ingest and the broker sources both use it.
package intake

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxKeyLen is the longest idempotency key, order key or topic, in
// characters (the columns are 255 wide).
const MaxKeyLen = 255

// ErrMissing is wrapped by Field.Extract when the header or JSON path is
// absent or empty.
var ErrMissing = errors.New("missing")

// Field says where a value comes from: a header, or a dotted path into a
// JSON object body. The zero Field is unset.
type Field struct {
	Header   string
	JSONPath string
	path     []string
}

// NewField checks and compiles a field: exactly one of header and
// jsonPath.
func NewField(header, jsonPath string) (Field, error) {
	switch {
	case header != "" && jsonPath != "":
		return Field{}, errors.New("set header or jsonPath, not both")
	case header == "" && jsonPath == "":
		return Field{}, errors.New("set header or jsonPath")
	case jsonPath != "":
		segs := strings.Split(strings.TrimPrefix(jsonPath, "$."), ".")
		for _, s := range segs {
			if s == "" {
				return Field{}, fmt.Errorf("jsonPath %q has an empty segment (write a.b.c)", jsonPath)
			}
		}
		return Field{JSONPath: jsonPath, path: segs}, nil
	}
	if strings.ContainsAny(header, " :\r\n") {
		return Field{}, fmt.Errorf("header %q is not a header name", header)
	}
	return Field{Header: header}, nil
}

// IsSet reports whether the field names a header or a path.
func (f Field) IsSet() bool { return f.Header != "" || f.JSONPath != "" }

// String describes the field for messages: header X or jsonPath a.b.
func (f Field) String() string {
	if f.Header != "" {
		return "header " + f.Header
	}
	return "jsonPath " + f.JSONPath
}

// Extract returns the field's value from a message: its headers (get
// returns a header's value, "" when absent) or its body. The value is
// checked as a key: non-empty, valid text, at most MaxKeyLen characters.
func (f Field) Extract(get func(string) string, body *Body) (string, error) {
	var v string
	if f.Header != "" {
		v = strings.TrimSpace(get(f.Header))
	} else {
		var err error
		if v, err = body.Lookup(f.path); err != nil {
			return "", fmt.Errorf("%s: %w", f, err)
		}
	}
	if v == "" {
		return "", fmt.Errorf("%s: %w", f, ErrMissing)
	}
	if err := CheckKey(v); err != nil {
		return "", fmt.Errorf("%s: %w", f, err)
	}
	return v, nil
}

// CheckKey checks a key or topic: valid UTF-8 without NUL, at most
// MaxKeyLen characters.
func CheckKey(v string) error {
	switch {
	case !utf8.ValidString(v) || strings.ContainsRune(v, 0):
		return errors.New("not valid text")
	case utf8.RuneCountInString(v) > MaxKeyLen:
		return fmt.Errorf("longer than %d characters", MaxKeyLen)
	}
	return nil
}

// Body is a message body that is decoded only when a JSON path needs it.
type Body struct {
	Raw     []byte
	decoded bool
	value   any
	err     error
}

// Lookup returns the scalar at path as text. A body that is not a JSON
// object, or a path that does not lead to a string, number or boolean, is
// an error; a missing field wraps ErrMissing.
func (b *Body) Lookup(path []string) (string, error) {
	if !b.decoded {
		b.decoded = true
		d := json.NewDecoder(bytes.NewReader(b.Raw))
		d.UseNumber()
		b.err = d.Decode(&b.value)
	}
	if b.err != nil {
		return "", errors.New("the body is not JSON")
	}
	v := b.value
	for i, seg := range path {
		obj, ok := v.(map[string]any)
		if !ok {
			return "", fmt.Errorf("%s is not an object", where(path[:i]))
		}
		if v, ok = obj[seg]; !ok {
			return "", ErrMissing
		}
	}
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case bool:
		return strconv.FormatBool(x), nil
	case nil:
		return "", ErrMissing
	}
	return "", errors.New("not a string, number or boolean")
}

func where(path []string) string {
	if len(path) == 0 {
		return "the body"
	}
	return strings.Join(path, ".")
}

// Rules are how one source turns a received message into an inbox row.
type Rules struct {
	Source         string
	IdempotencyKey Field // required for HTTP; brokers fall back to it after the message id
	OrderKey       Field // optional
	Topic          *Topic
	Headers        HeaderPolicy
}

// Input is one received message as the rules read it.
type Input struct {
	Topic     string              // where it arrived (the source name over HTTP)
	Header    func(string) string // a header's value, "" when absent
	Body      *Body
	MessageID string // the id the message carries (brokers); "" for none
	// Fallback names the message when it carries no id and the rules
	// find no idempotency key: a position that a redelivery repeats (a
	// Kafka offset, a JetStream stream sequence); "" for none.
	Fallback string
}

// Output is what the rules make of an Input.
type Output struct {
	IdempotencyKey string
	Key            string
	Topic          string
}

// Error is a message the rules cannot store, with the class of answer it
// deserves.
type Error struct {
	Unprocessable bool // the request is well formed but its content does not fit (422), else bad (400)
	Err           error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Apply extracts the idempotency key (the message id first, when the input
// carries one), the order key and the topic. A configured order key that
// is absent leaves the message without one (unordered).
func (r *Rules) Apply(in Input) (Output, error) {
	var out Output
	var err error
	switch {
	case in.MessageID != "":
		if err := CheckKey(in.MessageID); err != nil {
			return out, &Error{Unprocessable: true, Err: fmt.Errorf("message id: %w", err)}
		}
		out.IdempotencyKey = in.MessageID
	case r.IdempotencyKey.IsSet():
		if out.IdempotencyKey, err = r.IdempotencyKey.Extract(in.Header, in.Body); err != nil && in.Fallback != "" && errors.Is(err, ErrMissing) {
			out.IdempotencyKey, err = in.Fallback, nil
		}
		if err != nil {
			missingHeader := r.IdempotencyKey.Header != "" && errors.Is(err, ErrMissing)
			return out, &Error{Unprocessable: !missingHeader, Err: fmt.Errorf("idempotency key: %w", err)}
		}
	case in.Fallback != "":
		out.IdempotencyKey = in.Fallback
	default:
		return out, &Error{Err: errors.New("the message carries no id and the source names no idempotencyKey")}
	}
	if r.OrderKey.IsSet() {
		if out.Key, err = r.OrderKey.Extract(in.Header, in.Body); err != nil && !errors.Is(err, ErrMissing) {
			return out, &Error{Unprocessable: true, Err: fmt.Errorf("order key: %w", err)}
		}
	}
	t := r.Topic
	if t == nil {
		t, _ = ParseTopic(DefaultTopic)
	}
	if out.Topic, err = t.Render(Fields{Source: r.Source, Topic: in.Topic, Key: out.Key, ID: out.IdempotencyKey, Header: in.Header, Body: in.Body}); err != nil {
		return out, &Error{Unprocessable: true, Err: err}
	}
	return out, nil
}
