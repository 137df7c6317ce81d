// Package cloudevents renders an outbox row as a CloudEvents 1.0 event, for
// the destinations that send it in the binary or the structured content
// mode of their protocol binding:
//
//	attribute        value
//	specversion      1.0
//	id               the row id
//	source           the source template, rendered over the row
//	type             the type template ({{ topic }} by default)
//	time             created_at (RFC 3339, UTC); absent when unknown
//	subject          the row key; absent when empty
//	datacontenttype  application/json
//	data             the payload
//
// In binary mode each adapter writes the attributes as headers with its
// binding's prefix (HTTP and NATS "ce-", Kafka "ce_", AMQP
// "cloudEvents:") and datacontenttype as its content type; the body stays
// the payload. In structured mode the body is the JSON event format
// (Structured) and the content type is ContentTypeStructured. A row header
// in the binding's namespace is never sent: the row cannot set an
// attribute the relay sets.
package cloudevents

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/queuebox/queuebox/address"
	"github.com/queuebox/queuebox/outbox"
)

// The content modes.
const (
	Binary     = "binary"
	Structured = "structured"
)

// Values the relay sets.
const (
	SpecVersion = "1.0"
	// DataContentType is the content type of the payload.
	DataContentType = "application/json"
	// ContentTypeStructured is the content type of a structured event.
	ContentTypeStructured = "application/cloudevents+json; charset=UTF-8"
	// DefaultType is the type template when none is set.
	DefaultType = "{{ topic }}"
)

// Options are the cloudEvents keys of a destination.
type Options struct {
	// Mode is Binary (the default) or Structured.
	Mode string
	// Source is the template of the source attribute, a URI-reference
	// ("/orders", "https://shop.example/{{ aggregateType }}"). Required.
	Source string
	// Type is the template of the type attribute; empty: DefaultType.
	Type string
}

// Encoder renders rows as events. It is safe for concurrent use.
type Encoder struct {
	structured bool
	source     *address.Template
	typ        *address.Template
}

// New checks o and returns its Encoder.
func New(o Options) (*Encoder, error) {
	e := &Encoder{}
	switch o.Mode {
	case "", Binary:
	case Structured:
		e.structured = true
	default:
		return nil, fmt.Errorf("cloudEvents.mode: %q is not binary or structured", o.Mode)
	}
	if strings.TrimSpace(o.Source) == "" {
		return nil, errors.New("cloudEvents.source is required (a URI-reference such as /orders)")
	}
	var err error
	if e.source, err = address.ParseTemplate(o.Source); err != nil {
		return nil, fmt.Errorf("cloudEvents.source: %w", err)
	}
	if o.Type == "" {
		o.Type = DefaultType
	}
	if e.typ, err = address.ParseTemplate(o.Type); err != nil {
		return nil, fmt.Errorf("cloudEvents.type: %w", err)
	}
	return e, nil
}

// Structured reports whether events are sent in structured mode.
func (e *Encoder) Structured() bool { return e.structured }

// Attr is one attribute of an event.
type Attr struct {
	Name, Value string
}

// Attributes returns the attributes of m's event, but datacontenttype
// (each binding carries it as its content type) and data. A template that
// cannot be rendered for the row, or renders empty, is a permanent
// failure of the row.
func (e *Encoder) Attributes(m *outbox.Message) ([]Attr, error) {
	source, err := e.render("source", e.source, m)
	if err != nil {
		return nil, err
	}
	typ, err := e.render("type", e.typ, m)
	if err != nil {
		return nil, err
	}
	attrs := make([]Attr, 0, 6)
	attrs = append(attrs, Attr{"specversion", SpecVersion}, Attr{"id", m.ID}, Attr{"source", source}, Attr{"type", typ})
	if !m.CreatedAt.IsZero() {
		attrs = append(attrs, Attr{"time", m.CreatedAt.UTC().Format(time.RFC3339Nano)})
	}
	if m.Key != "" {
		attrs = append(attrs, Attr{"subject", m.Key})
	}
	return attrs, nil
}

func (e *Encoder) render(name string, t *address.Template, m *outbox.Message) (string, error) {
	v, err := t.Render(m)
	if err != nil {
		return "", outbox.Permanent(fmt.Errorf("cloudEvents.%s %q: %w", name, t.String(), err))
	}
	if v == "" {
		return "", outbox.Permanent(fmt.Errorf("cloudEvents.%s %q renders empty for this row; the attribute is required", name, t.String()))
	}
	return v, nil
}

// Event returns m's event in the JSON event format: the body of structured
// mode. A payload that is not JSON travels base64-encoded (data_base64,
// datacontenttype application/octet-stream).
func (e *Encoder) Event(m *outbox.Message) ([]byte, error) {
	attrs, err := e.Attributes(m)
	if err != nil {
		return nil, err
	}
	ev := make(map[string]any, len(attrs)+2)
	for _, a := range attrs {
		ev[a.Name] = a.Value
	}
	if json.Valid(m.Payload) {
		ev["datacontenttype"] = DataContentType
		ev["data"] = json.RawMessage(m.Payload)
	} else {
		ev["datacontenttype"] = "application/octet-stream"
		ev["data_base64"] = m.Payload // encoding/json writes []byte as base64
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return nil, outbox.Permanent(fmt.Errorf("cloudEvents: encode the event: %w", err))
	}
	return b, nil
}

// InNamespace reports whether header name is in the namespace of a
// binding's attribute prefix (compared in any case), or is the content
// type header: a row header of such a name is not sent while events are.
func InNamespace(name, prefix string) bool {
	return len(name) >= len(prefix) && strings.EqualFold(name[:len(prefix)], prefix) ||
		strings.EqualFold(name, "content-type")
}

// HeaderValue returns v as a header carries it: as it is, unless it holds
// a control character or leading or trailing white space, which a header
// cannot carry; then percent-encoded (every byte but printable ASCII other
// than space, '"' and '%' as %XX), as the HTTP binding prescribes.
func HeaderValue(v string) string {
	if !needsEncoding(v) {
		return v
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(v) * 3)
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c > ' ' && c < 0x7f && c != '"' && c != '%' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

func needsEncoding(v string) bool {
	if v == "" {
		return false
	}
	if v[0] == ' ' || v[0] == '\t' || v[len(v)-1] == ' ' || v[len(v)-1] == '\t' {
		return true
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' || c == 0x7f {
			return true
		}
	}
	return false
}
