package address

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/queuebox/queuebox/outbox"
)

// Template is a destination address (a NATS subject, a Kafka topic, an AMQP
// exchange or routing key, an HTTP URL) with placeholders over the row:
// {{ topic }}, {{ key }}, {{ aggregateType }}, {{ id }} and
// {{ payload.a.b }}. Everything else is literal text.
type Template struct {
	src   string
	parts []part
}

type part struct {
	literal string
	field   string   // "" for a literal
	path    []string // for payload.a.b
}

// Fields a template may name.
var templateFields = map[string]bool{"topic": true, "key": true, "aggregateType": true, "id": true, "payload": true}

// ParseTemplate compiles s. An unknown placeholder, an unclosed "{{" or an
// empty placeholder is an error that names it.
func ParseTemplate(s string) (*Template, error) {
	t := &Template{src: s}
	rest := s
	for {
		i := strings.Index(rest, "{{")
		if i < 0 {
			if strings.Contains(rest, "}}") {
				return nil, fmt.Errorf("template %q: \"}}\" without \"{{\"", s)
			}
			if rest != "" {
				t.parts = append(t.parts, part{literal: rest})
			}
			return t, nil
		}
		if i > 0 {
			if strings.Contains(rest[:i], "}}") {
				return nil, fmt.Errorf("template %q: \"}}\" without \"{{\"", s)
			}
			t.parts = append(t.parts, part{literal: rest[:i]})
		}
		rest = rest[i+2:]
		j := strings.Index(rest, "}}")
		if j < 0 {
			return nil, fmt.Errorf("template %q: \"{{\" is not closed by \"}}\"", s)
		}
		name := strings.TrimSpace(rest[:j])
		rest = rest[j+2:]
		p, err := parsePlaceholder(name)
		if err != nil {
			return nil, fmt.Errorf("template %q: %w", s, err)
		}
		t.parts = append(t.parts, p)
	}
}

func parsePlaceholder(name string) (part, error) {
	if name == "" {
		return part{}, fmt.Errorf("empty placeholder {{ }}")
	}
	segs := strings.Split(name, ".")
	field := segs[0]
	if !templateFields[field] {
		return part{}, fmt.Errorf("unknown placeholder {{ %s }} (known: topic, key, aggregateType, id, payload.<field>)", name)
	}
	if field == "payload" {
		if len(segs) < 2 {
			return part{}, fmt.Errorf("placeholder {{ payload }} needs a field path, such as {{ payload.customer.id }}")
		}
		for _, s := range segs[1:] {
			if s == "" {
				return part{}, fmt.Errorf("placeholder {{ %s }} has an empty path segment", name)
			}
		}
		return part{field: field, path: segs[1:]}, nil
	}
	if len(segs) > 1 {
		return part{}, fmt.Errorf("placeholder {{ %s }}: only payload has fields", name)
	}
	return part{field: field}, nil
}

// String returns the source text of the template.
func (t *Template) String() string { return t.src }

// Static reports whether the template has no placeholders.
func (t *Template) Static() bool {
	for _, p := range t.parts {
		if p.field != "" {
			return false
		}
	}
	return true
}

// Uses reports whether the template names field ("topic", "key",
// "aggregateType", "id" or "payload").
func (t *Template) Uses(field string) bool {
	for _, p := range t.parts {
		if p.field == field {
			return true
		}
	}
	return false
}

// Placeholders returns the template's placeholders in order, as written
// without braces: "topic", "key", "payload.customer.id".
func (t *Template) Placeholders() []string {
	var out []string
	for _, p := range t.parts {
		if p.field != "" {
			out = append(out, p.name())
		}
	}
	return out
}

func (p part) name() string {
	if p.field == "payload" {
		return "payload." + strings.Join(p.path, ".")
	}
	return p.field
}

// Render fills the template from m. A payload path that does not exist, or
// a payload that is not a JSON object, is a permanent error: the same row
// can never render.
func (t *Template) Render(m *outbox.Message) (string, error) {
	return t.RenderEscaped(m, nil)
}

// Escaper turns the value of a placeholder into the text written in its
// place, or refuses it. i is the placeholder's position among the
// template's placeholders (Placeholders()[i] is name), from 0.
type Escaper func(i int, name, value string) (string, error)

// RenderEscaped is Render with each placeholder's value passed through esc
// (nil: written as it is), so that the destination owning the address can
// escape a value for where it lands, or refuse it. A refusal is permanent
// (the same row renders the same way on every attempt), and its error names
// the template and the placeholder.
func (t *Template) RenderEscaped(m *outbox.Message, esc Escaper) (string, error) {
	if len(t.parts) == 1 && t.parts[0].field == "" {
		return t.parts[0].literal, nil
	}
	var b strings.Builder
	var payload any
	var decoded bool
	i := -1
	for _, p := range t.parts {
		var v string
		switch p.field {
		case "":
			b.WriteString(p.literal)
			continue
		case "topic":
			v = m.Topic
		case "key":
			v = m.Key
		case "aggregateType":
			v = m.AggregateType
		case "id":
			v = m.ID
		case "payload":
			if !decoded {
				d := json.NewDecoder(bytes.NewReader(m.Payload))
				d.UseNumber()
				if err := d.Decode(&payload); err != nil {
					return "", outbox.Permanent(fmt.Errorf("template %q: payload is not JSON: %v", t.src, err))
				}
				decoded = true
			}
			var err error
			if v, err = lookup(payload, p.path); err != nil {
				return "", outbox.Permanent(fmt.Errorf("template %q: %w", t.src, err))
			}
		}
		i++
		if esc != nil {
			var err error
			if v, err = esc(i, p.name(), v); err != nil {
				return "", outbox.Permanent(fmt.Errorf("template %q: {{ %s }}: %w", t.src, p.name(), err))
			}
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

func lookup(v any, path []string) (string, error) {
	for i, seg := range path {
		obj, ok := v.(map[string]any)
		if !ok {
			if i == 0 {
				return "", fmt.Errorf("payload is not a JSON object")
			}
			return "", fmt.Errorf("payload.%s is not an object", strings.Join(path[:i], "."))
		}
		v, ok = obj[seg]
		if !ok {
			return "", fmt.Errorf("payload has no field %s", strings.Join(path[:i+1], "."))
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
		return "", fmt.Errorf("payload.%s is null", strings.Join(path, "."))
	default:
		return "", fmt.Errorf("payload.%s is not a string, number or boolean", strings.Join(path, "."))
	}
}
