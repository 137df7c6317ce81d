package address

import (
	"errors"
	"strings"
	"testing"

	"github.com/queuebox/queuebox/outbox"
)

func TestTokenRule(t *testing.T) {
	t.Parallel()
	nats := TokenRule{Wildcards: "*>"}
	natsSpan := TokenRule{Span: true, Wildcards: "*>"}
	amqp := TokenRule{Wildcards: "*#"}
	tests := []struct {
		rule TokenRule
		v    string
		ok   bool
	}{
		{nats, "customer-42", true},
		{nats, "", true}, // the whole name is checked by the destination (empty tokens)
		{nats, "x.y.z", false},
		{nats, "a b", false},
		{nats, "a\tb", false},
		{nats, "*", false},
		{nats, ">", false},
		{nats, "a*", false},
		{nats, "Zoë", true},
		{natsSpan, "x.y.z", true},
		{natsSpan, "x.*", false},
		{natsSpan, "x.>", false},
		{natsSpan, "x..y", false},
		{natsSpan, ".x", false},
		{natsSpan, "x.", false},
		{natsSpan, "a*.b", true}, // a token holding '*' is not a wildcard
		{natsSpan, "x y", false},
		{amqp, "eu", true},
		{amqp, "eu.west", false},
		{amqp, "#", false},
		{amqp, "a b", false},
		{TokenRule{Span: true, Wildcards: "*#"}, "eu.west", true},
		{TokenRule{Span: true, Wildcards: "*#"}, "eu.#", false},
	}
	for _, tt := range tests {
		err := tt.rule.Check(tt.v)
		if (err == nil) != tt.ok {
			t.Errorf("%+v.Check(%q) = %v, want ok %v", tt.rule, tt.v, err, tt.ok)
		}
	}
}

func TestURLParts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tmpl string
		want []URLPart
	}{
		{"http://h/hooks/{{ key }}", []URLPart{URLPath}},
		{"http://h:8080/{{ topic }}/{{ key }}?k={{ key }}&t={{ topic }}#{{ id }}", []URLPart{URLPath, URLPath, URLQuery, URLQuery, URLFragment}},
		{"http://{{ payload.tenant }}.example.com/x", []URLPart{URLAuthority}},
		{"http://h{{ key }}", []URLPart{URLAuthority}},
		{"{{ payload.url }}", []URLPart{URLScheme}},
		{"{{ payload.base }}/hooks/{{ key }}?k={{ key }}", []URLPart{URLScheme, URLPath, URLQuery}},
		{"{{ payload.scheme }}://{{ payload.host }}/{{ key }}", []URLPart{URLScheme, URLAuthority, URLPath}},
		{"http{{ key }}://h/", []URLPart{URLScheme}},
		{"https://h?x={{ key }}", []URLPart{URLQuery}},
		{"https://h#{{ key }}", []URLPart{URLFragment}},
		{"https://h/a?b#c{{ key }}", []URLPart{URLFragment}},
		{"https://h/static", nil},
	}
	for _, tt := range tests {
		tpl, err := ParseTemplate(tt.tmpl)
		if err != nil {
			t.Fatal(err)
		}
		got := tpl.URLParts()
		if len(got) != len(tt.want) {
			t.Errorf("URLParts(%q) = %v, want %v", tt.tmpl, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("URLParts(%q) = %v, want %v", tt.tmpl, got, tt.want)
				break
			}
		}
	}
}

func TestEscapeURLValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		part      URLPart
		in, want  string
		wantError bool
	}{
		{URLPath, "../../admin/delete?all=true#x", "..%2F..%2Fadmin%2Fdelete%3Fall=true%23x", false},
		{URLPath, "..", "%2E%2E", false},
		{URLPath, ".", "%2E", false},
		{URLPath, "...", "...", false},
		{URLPath, "a b%2F", "a%20b%252F", false},
		{URLPath, "order.created", "order.created", false},
		{URLQuery, "a&b=c#d e", "a%26b%3Dc%23d+e", false},
		{URLFragment, "x/y", "x%2Fy", false},
		{URLAuthority, "tenant-1", "tenant-1", false},
		{URLAuthority, "evil.com/x", "", true},
		{URLAuthority, "a@evil.com", "", true},
		{URLAuthority, "a b", "", true},
		{URLScheme, "https://x/y", "https://x/y", false},
	}
	for _, tt := range tests {
		got, err := EscapeURLValue(tt.part, tt.in)
		if (err != nil) != tt.wantError || got != tt.want {
			t.Errorf("EscapeURLValue(%v, %q) = %q, %v; want %q (error %v)", tt.part, tt.in, got, err, tt.want, tt.wantError)
		}
	}
}

func TestRenderEscaped(t *testing.T) {
	t.Parallel()
	tpl, err := ParseTemplate("http://h/hooks/{{ key }}?r={{ payload.customer.region }}")
	if err != nil {
		t.Fatal(err)
	}
	m := testMessage()
	m.Key = "../../admin"
	m.Payload = []byte(`{"customer": {"region": "eu&x=1"}}`)
	parts := tpl.URLParts()
	var names []string
	got, err := tpl.RenderEscaped(m, func(i int, name, v string) (string, error) {
		names = append(names, name)
		return EscapeURLValue(parts[i], v)
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "http://h/hooks/..%2F..%2Fadmin?r=eu%26x%3D1"; got != want {
		t.Errorf("RenderEscaped = %q, want %q", got, want)
	}
	if strings.Join(names, ",") != "key,payload.customer.region" || strings.Join(tpl.Placeholders(), ",") != "key,payload.customer.region" {
		t.Errorf("names %v, placeholders %v", names, tpl.Placeholders())
	}
	// A refusal is permanent and names the template and the placeholder.
	subj, _ := ParseTemplate("events.{{ key }}")
	m.Key = "x.y.z"
	_, err = subj.RenderEscaped(m, func(_ int, _, v string) (string, error) { return v, TokenRule{Wildcards: "*>"}.Check(v) })
	if err == nil || !outbox.IsPermanent(err) || !strings.Contains(err.Error(), `{{ key }}`) || !strings.Contains(err.Error(), `"x.y.z"`) {
		t.Fatalf("RenderEscaped of a refused value = %v, want a permanent error naming {{ key }} and the value", err)
	}
	var perm interface{ Unwrap() error }
	if !errors.As(err, &perm) {
		t.Fatalf("%v does not unwrap", err)
	}
}
