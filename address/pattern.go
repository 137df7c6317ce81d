package address

import (
	"errors"
	"fmt"
	"strings"
)

// Pattern is a compiled topic pattern. Tokens are dot-separated: "*"
// matches exactly one token, "**" (only as the last token) matches one or
// more tokens, and anything else matches itself literally.
//
// A wildcard matches any token, including an empty one ("order.*" matches
// "order."), but no pattern matches the empty topic.
type Pattern struct {
	src    string
	tokens []string // literal tokens and "*"; never "**"
	tail   bool     // the pattern ends with "**"
}

// ParsePattern compiles s. Empty tokens ("a..b", a leading or trailing
// dot, the empty pattern) and "**" anywhere but last are errors, as is a
// token that mixes a wildcard with other text ("ord*").
func ParsePattern(s string) (Pattern, error) {
	if s == "" {
		return Pattern{}, errors.New("empty topic pattern")
	}
	parts := strings.Split(s, ".")
	p := Pattern{src: s, tokens: make([]string, 0, len(parts))}
	for i, tok := range parts {
		switch {
		case tok == "":
			return Pattern{}, fmt.Errorf("topic pattern %q: empty token at position %d (leading, trailing or doubled dot)", s, i+1)
		case tok == "**":
			if i != len(parts)-1 {
				return Pattern{}, fmt.Errorf("topic pattern %q: \"**\" may only be the last token", s)
			}
			p.tail = true
		case tok != "*" && strings.Contains(tok, "*"):
			return Pattern{}, fmt.Errorf("topic pattern %q: token %q mixes \"*\" with text (a wildcard must be a whole token)", s, tok)
		default:
			p.tokens = append(p.tokens, tok)
		}
	}
	return p, nil
}

// MustParsePattern is ParsePattern for patterns known to be valid, such as
// constants in tests; it panics on an error.
func MustParsePattern(s string) Pattern {
	p, err := ParsePattern(s)
	if err != nil {
		panic(err)
	}
	return p
}

// String returns the pattern as written.
func (p Pattern) String() string { return p.src }

// Literal reports whether the pattern has no wildcard, that is, whether it
// matches exactly one topic: itself.
func (p Pattern) Literal() bool {
	if p.tail {
		return false
	}
	for _, t := range p.tokens {
		if t == "*" {
			return false
		}
	}
	return true
}

// Match reports whether topic matches the pattern. It does not allocate.
func (p Pattern) Match(topic string) bool {
	if topic == "" || (len(p.tokens) == 0 && !p.tail) {
		return false
	}
	rest := topic
	exhausted := false // no token left in rest
	for _, want := range p.tokens {
		if exhausted {
			return false
		}
		var tok string
		if i := strings.IndexByte(rest, '.'); i >= 0 {
			tok, rest = rest[:i], rest[i+1:]
		} else {
			tok, rest, exhausted = rest, "", true
		}
		if want != "*" && want != tok {
			return false
		}
	}
	if p.tail {
		// "**" needs at least one more token; after a dot even an empty
		// one counts ("order." has the tokens "order" and "").
		return !exhausted
	}
	return exhausted
}

// Covers reports whether every topic that q matches is also matched by p,
// so that a route with pattern q placed after a route with pattern p can
// never be chosen.
func (p Pattern) Covers(q Pattern) bool {
	if len(p.tokens) == 0 && !p.tail || len(q.tokens) == 0 && !q.tail {
		return false
	}
	for i, want := range p.tokens {
		if i >= len(q.tokens) {
			return false // q ends (or has its "**") where p still needs a token
		}
		if want != "*" && want != q.tokens[i] {
			return false // a literal covers only the same literal
		}
	}
	if p.tail {
		return len(q.tokens) > len(p.tokens) || (len(q.tokens) == len(p.tokens) && q.tail)
	}
	return len(q.tokens) == len(p.tokens) && !q.tail
}
