package address

import (
	"strings"
	"testing"
)

func TestPatternMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern string
		topic   string
		want    bool
	}{
		{"order.**", "order.created", true},
		{"order.**", "order.eu.created", true},
		{"order.**", "order", false},
		{"order.**", "orders.created", false},
		{"order.**", "order.", true},
		{"invoice.*", "invoice.paid", true},
		{"invoice.*", "invoice.paid.late", false},
		{"invoice.*", "invoice", false},
		{"invoice.*", "invoicepaid", false},
		{"**", "a", true},
		{"**", "a.b.c", true},
		{"**", "", false},
		{"*", "a", true},
		{"*", "a.b", false},
		{"*.*", "a.b", true},
		{"*.created", "order.created", true},
		{"*.created", "order.updated", false},
		{"a.*.c", "a.b.c", true},
		{"a.*.c", "a.b.d", false},
		{"a.*.**", "a.b", false},
		{"a.*.**", "a.b.c", true},
		{"order.created", "order.created", true},
		{"order.created", "order.created.v2", false},
		{"order.created", "order", false},
		{"order", "order", true},
		{"order", "", false},
	}
	for _, tt := range tests {
		p, err := ParsePattern(tt.pattern)
		if err != nil {
			t.Fatalf("ParsePattern(%q): %v", tt.pattern, err)
		}
		if got := p.Match(tt.topic); got != tt.want {
			t.Errorf("%q.Match(%q) = %v, want %v", tt.pattern, tt.topic, got, tt.want)
		}
		if p.String() != tt.pattern {
			t.Errorf("String() = %q, want %q", p.String(), tt.pattern)
		}
	}
}

func TestParsePatternErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ pattern, wantErr string }{
		{"", "empty topic pattern"},
		{"a..b", "empty token"},
		{".a", "empty token"},
		{"a.", "empty token"},
		{".", "empty token"},
		{"**.a", `"**" may only be the last token`},
		{"a.**.b", `"**" may only be the last token`},
		{"ord*", "mixes"},
		{"a.***", "mixes"},
	}
	for _, tt := range tests {
		_, err := ParsePattern(tt.pattern)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParsePattern(%q) error = %v, want it to contain %q", tt.pattern, err, tt.wantErr)
		}
	}
}

func TestPatternLiteral(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{"a": true, "a.b": true, "a.*": false, "**": false, "a.**": false} {
		if got := MustParsePattern(s).Literal(); got != want {
			t.Errorf("%q.Literal() = %v, want %v", s, got, want)
		}
	}
}

func TestPatternCovers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p, q string
		want bool
	}{
		{"**", "a", true},
		{"**", "a.**", true},
		{"**", "**", true},
		{"a.**", "a.b", true},
		{"a.**", "a.*", true},
		{"a.**", "a.**", true},
		{"a.**", "a", false},
		{"a.**", "**", false},
		{"a.*", "a.b", true},
		{"a.*", "a.b.c", false},
		{"a.*", "a.**", false},
		{"a.b", "a.*", false},
		{"a.b", "a.b", true},
		{"*.b", "a.b", true},
		{"*", "**", false},
		{"*.**", "a.**", true},
	}
	for _, tt := range tests {
		if got := MustParsePattern(tt.p).Covers(MustParsePattern(tt.q)); got != tt.want {
			t.Errorf("%q.Covers(%q) = %v, want %v", tt.p, tt.q, got, tt.want)
		}
	}
}

func TestPatternMatchDoesNotAllocate(t *testing.T) {
	p := MustParsePattern("order.*.**")
	allocs := testing.AllocsPerRun(100, func() {
		if !p.Match("order.eu.created.v2") {
			t.Fatal("no match")
		}
	})
	if allocs != 0 {
		t.Errorf("Match allocates %v times per call, want 0", allocs)
	}
}

func BenchmarkPatternMatch(b *testing.B) {
	p := MustParsePattern("order.*.**")
	for b.Loop() {
		p.Match("order.eu.created.v2")
	}
}

func FuzzPattern(f *testing.F) {
	for _, s := range []string{"order.**", "invoice.*", "**", "*", "a.b.c", "a..b", ".", "a.**.b", "ord*", ""} {
		f.Add(s, "order.created")
	}
	f.Fuzz(func(t *testing.T, pattern, topic string) {
		p, err := ParsePattern(pattern)
		if err != nil {
			return
		}
		p.Match(topic)
		if p.String() != pattern {
			t.Fatalf("String() = %q, want %q", p.String(), pattern)
		}
		if p.Literal() {
			if !p.Match(pattern) {
				t.Fatalf("literal pattern %q does not match itself", pattern)
			}
			if topic != pattern && p.Match(topic) {
				t.Fatalf("literal pattern %q matches %q", pattern, topic)
			}
		}
		if !p.Covers(p) {
			t.Fatalf("pattern %q does not cover itself", pattern)
		}
		if q, err := ParsePattern(topic); err == nil && p.Covers(q) && q.Literal() && !p.Match(topic) {
			t.Fatalf("%q covers %q but does not match it", pattern, topic)
		}
	})
}
