package address

import (
	"strings"
	"testing"

	"github.com/queuebox/queuebox/outbox"
)

func testMessage() *outbox.Message {
	return &outbox.Message{
		ID:            "0b4e7c1a-1111-2222-3333-444455556666",
		Topic:         "order.created",
		Key:           "customer-42",
		AggregateType: "order",
		Payload: []byte(`{"customer":{"id":42,"region":"eu","vip":true,"name":"Zoë",` +
			`"nothing":null,"tags":["a"]},"amount":12.50,"big":12345678901234567890,"flag":false}`),
	}
}

func TestTemplateRender(t *testing.T) {
	t.Parallel()
	tests := []struct{ tmpl, want string }{
		{"{{ topic }}", "order.created"},
		{"{{topic}}", "order.created"},
		{"{{ key }}", "customer-42"},
		{"{{ aggregateType }}", "order"},
		{"{{ id }}", "0b4e7c1a-1111-2222-3333-444455556666"},
		{"events.{{ aggregateType }}.{{ topic }}", "events.order.order.created"},
		{"{{ payload.customer.region }}", "eu"},
		{"{{ payload.customer.id }}", "42"},
		{"{{ payload.amount }}", "12.50"},
		{"{{ payload.big }}", "12345678901234567890"},
		{"{{ payload.customer.vip }}", "true"},
		{"{{ payload.flag }}", "false"},
		{"{{ payload.customer.name }}", "Zoë"},
		{"/hooks/{{ topic }}?k={{ key }}", "/hooks/order.created?k=customer-42"},
		{"static", "static"},
		{"", ""},
		{"a{b}c", "a{b}c"},
	}
	m := testMessage()
	for _, tt := range tests {
		tpl, err := ParseTemplate(tt.tmpl)
		if err != nil {
			t.Fatalf("ParseTemplate(%q): %v", tt.tmpl, err)
		}
		got, err := tpl.Render(m)
		if err != nil {
			t.Fatalf("Render(%q): %v", tt.tmpl, err)
		}
		if got != tt.want {
			t.Errorf("Render(%q) = %q, want %q", tt.tmpl, got, tt.want)
		}
		if tpl.String() != tt.tmpl {
			t.Errorf("String() = %q, want %q", tpl.String(), tt.tmpl)
		}
	}
}

func TestTemplateRenderPermanentErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tmpl    string
		payload string
		wantErr string
	}{
		{"{{ payload.missing }}", "", "payload has no field missing"},
		{"{{ payload.customer.missing }}", "", "payload has no field customer.missing"},
		{"{{ payload.customer.id.x }}", "", "payload.customer.id is not an object"},
		{"{{ payload.customer.nothing }}", "", "payload.customer.nothing is null"},
		{"{{ payload.customer.tags }}", "", "payload.customer.tags is not a string, number or boolean"},
		{"{{ payload.customer }}", "", "payload.customer is not a string, number or boolean"},
		{"{{ payload.a }}", `[1,2]`, "payload is not a JSON object"},
		{"{{ payload.a }}", `not json`, "payload is not JSON"},
	}
	for _, tt := range tests {
		m := testMessage()
		if tt.payload != "" {
			m.Payload = []byte(tt.payload)
		}
		tpl, err := ParseTemplate(tt.tmpl)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tpl.Render(m)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("Render(%q) error = %v, want it to contain %q", tt.tmpl, err, tt.wantErr)
			continue
		}
		if !outbox.IsPermanent(err) {
			t.Errorf("Render(%q) error %v is not permanent", tt.tmpl, err)
		}
	}
}

func TestParseTemplateErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ tmpl, wantErr string }{
		{"{{ topc }}", "unknown placeholder {{ topc }}"},
		{"x.{{ Topic }}", "unknown placeholder {{ Topic }}"},
		{"{{ }}", "empty placeholder"},
		{"{{ topic", `"{{" is not closed`},
		{"topic }}", `"}}" without "{{"`},
		{"a}}{{ topic }}", `"}}" without "{{"`},
		{"{{ payload }}", "needs a field path"},
		{"{{ payload..a }}", "empty path segment"},
		{"{{ payload.a. }}", "empty path segment"},
		{"{{ topic.x }}", "only payload has fields"},
	}
	for _, tt := range tests {
		_, err := ParseTemplate(tt.tmpl)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParseTemplate(%q) error = %v, want it to contain %q", tt.tmpl, err, tt.wantErr)
		}
	}
}

func TestTemplateStaticAndUses(t *testing.T) {
	t.Parallel()
	tpl, err := ParseTemplate("x.{{ topic }}.{{ payload.a }}")
	if err != nil {
		t.Fatal(err)
	}
	if tpl.Static() {
		t.Error("Static() = true")
	}
	if !tpl.Uses("topic") || !tpl.Uses("payload") || tpl.Uses("key") {
		t.Error("Uses is wrong")
	}
	st, _ := ParseTemplate("billing")
	if !st.Static() {
		t.Error("Static() = false for a literal")
	}
}

func FuzzTemplate(f *testing.F) {
	for _, s := range []string{"{{ topic }}", "events.{{ aggregateType }}", "{{ payload.a.b }}", "{{", "}}", "{{ }}", "a{{ key }}b{{ id }}c", "{{ payload..x }}"} {
		f.Add(s, []byte(`{"a":{"b":"x"}}`))
	}
	f.Fuzz(func(t *testing.T, src string, payload []byte) {
		tpl, err := ParseTemplate(src)
		if err != nil {
			return
		}
		if tpl.String() != src {
			t.Fatalf("String() = %q, want %q", tpl.String(), src)
		}
		m := testMessage()
		m.Payload = payload
		out, err := tpl.Render(m)
		if err != nil {
			if !outbox.IsPermanent(err) {
				t.Fatalf("render error %v is not permanent", err)
			}
			return
		}
		if tpl.Static() && out != src {
			t.Fatalf("static template %q rendered %q", src, out)
		}
		// A value escaped for a URL path stays one segment: no "/", "?"
		// or "#" of its own, and never a dot-segment.
		parts := tpl.URLParts()
		if len(parts) != len(tpl.Placeholders()) {
			t.Fatalf("%d URL parts for %d placeholders", len(parts), len(tpl.Placeholders()))
		}
		for _, v := range []string{string(payload), m.Key, m.Topic} {
			esc, err := EscapeURLValue(URLPath, v)
			if err != nil || strings.ContainsAny(esc, "/?#") || esc == "." || esc == ".." {
				t.Fatalf("EscapeURLValue(path, %q) = %q, %v", v, esc, err)
			}
		}
	})
}
