package postgres

import (
	"fmt"
	"strings"
	"unicode"
)

// topicRegexp translates a router topic pattern into an
// anchored PostgreSQL regular expression that matches exactly the topics
// the router's pattern matches: tokens are dot-separated, "*" is one token
// (which may be empty), "**" (last only) is one or more tokens, anything
// else is literal and is escaped. The validation mirrors address.ParsePattern.
func topicRegexp(pattern string) (string, error) {
	if pattern == "" {
		return "", fmt.Errorf("empty topic pattern")
	}
	parts := strings.Split(pattern, ".")
	var b strings.Builder
	b.WriteString("^")
	for i, tok := range parts {
		if i > 0 {
			b.WriteString(`\.`)
		}
		switch {
		case tok == "":
			return "", fmt.Errorf("topic pattern %q: empty token at position %d (leading, trailing or doubled dot)", pattern, i+1)
		case tok == "**":
			if i != len(parts)-1 {
				return "", fmt.Errorf("topic pattern %q: \"**\" may only be the last token", pattern)
			}
			b.WriteString(`[^.]*(\.[^.]*)*`)
		case tok == "*":
			b.WriteString(`[^.]*`)
		case strings.Contains(tok, "*"):
			return "", fmt.Errorf("topic pattern %q: token %q mixes \"*\" with text (a wildcard must be a whole token)", pattern, tok)
		default:
			for _, r := range tok {
				// In an ARE a backslash before a non-alphanumeric character
				// makes it literal; letters and digits need no escape.
				if !(r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)) {
					b.WriteByte('\\')
				}
				b.WriteRune(r)
			}
		}
	}
	b.WriteString("$")
	return b.String(), nil
}
