package intake

import (
	"fmt"
	"strings"

	"github.com/queuebox/queuebox/address"
	"github.com/queuebox/queuebox/outbox"
)

// Topic is the template that names a received message's topic. Besides the
// address placeholders ({{ topic }}: the subject, Kafka topic or routing
// key the message arrived on, or the source name over HTTP; {{ key }}: the
// order key; {{ id }}; {{ payload.a.b }}) it knows {{ source }} and
// {{ header.Name }}.
type Topic struct {
	src   string
	parts []topicPart
}

type topicPart struct {
	literal string
	source  bool
	header  string
	addr    *address.Template // one address placeholder
}

// DefaultTopic is the topic template of a source that sets none.
const DefaultTopic = "{{ topic }}"

// ParseTopic compiles a topic template; an unknown placeholder is an error
// that names it.
func ParseTopic(s string) (*Topic, error) {
	t := &Topic{src: s}
	rest := s
	for rest != "" {
		i := strings.Index(rest, "{{")
		if i < 0 {
			t.parts = append(t.parts, topicPart{literal: rest})
			break
		}
		if i > 0 {
			t.parts = append(t.parts, topicPart{literal: rest[:i]})
		}
		j := strings.Index(rest[i:], "}}")
		if j < 0 {
			return nil, fmt.Errorf("template %q: \"{{\" is not closed by \"}}\"", s)
		}
		name := strings.TrimSpace(rest[i+2 : i+j])
		rest = rest[i+j+2:]
		switch {
		case name == "source":
			t.parts = append(t.parts, topicPart{source: true})
		case strings.HasPrefix(name, "header."):
			h := strings.TrimPrefix(name, "header.")
			if h == "" || strings.ContainsAny(h, " :") {
				return nil, fmt.Errorf("template %q: {{ %s }} needs a header name, such as {{ header.X-GitHub-Event }}", s, name)
			}
			t.parts = append(t.parts, topicPart{header: h})
		default:
			a, err := address.ParseTemplate("{{ " + name + " }}")
			if err != nil {
				return nil, fmt.Errorf("template %q: {{ %s }}: unknown placeholder (known: source, header.<Name>, topic, key, id, payload.<field>)", s, name)
			}
			t.parts = append(t.parts, topicPart{addr: a})
		}
	}
	for _, p := range t.parts {
		if p.literal != "" && strings.Contains(p.literal, "}}") {
			return nil, fmt.Errorf("template %q: \"}}\" without \"{{\"", s)
		}
	}
	return t, nil
}

// String is the template's source text.
func (t *Topic) String() string { return t.src }

// Fields is what a topic is rendered from.
type Fields struct {
	Source string
	Topic  string // where it arrived: subject, Kafka topic, routing key; the source over HTTP
	Key    string
	ID     string
	Header func(string) string
	Body   *Body
}

// Render fills the template. An empty result, a missing header or payload
// field is an error.
func (t *Topic) Render(f Fields) (string, error) {
	var b strings.Builder
	var m *outbox.Message
	for _, p := range t.parts {
		switch {
		case p.source:
			b.WriteString(f.Source)
		case p.header != "":
			v := ""
			if f.Header != nil {
				v = strings.TrimSpace(f.Header(p.header))
			}
			if v == "" {
				return "", fmt.Errorf("topic %q: no header %s", t.src, p.header)
			}
			b.WriteString(v)
		case p.addr != nil:
			if m == nil {
				m = &outbox.Message{Topic: f.Topic, Key: f.Key, ID: f.ID}
				if f.Body != nil {
					m.Payload = f.Body.Raw
				}
			}
			v, err := p.addr.Render(m)
			if err != nil {
				return "", fmt.Errorf("topic: %w", err)
			}
			b.WriteString(v)
		default:
			b.WriteString(p.literal)
		}
	}
	s := b.String()
	if s == "" {
		return "", fmt.Errorf("topic %q renders empty", t.src)
	}
	if err := CheckKey(s); err != nil {
		return "", fmt.Errorf("topic: %w", err)
	}
	return s, nil
}
