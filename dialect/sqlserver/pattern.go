package sqlserver

import (
	"strings"

	"github.com/queuebox/queuebox/address"
	"github.com/queuebox/queuebox/outbox"
)

// likeEscape is the escape character of the LIKE patterns topicLike builds
// (the statements say ESCAPE N'\').
const likeEscape = '\\'

// topicFilter is a router topic pattern as the operator queries use it:
// SQL Server (before 2025) has no regular expressions, so the statement
// narrows the rows with a LIKE pattern that matches a superset of the
// topics the router pattern matches, and Go keeps the rows the router
// pattern matches exactly.
type topicFilter struct {
	pattern address.Pattern
	like    string // "" when the LIKE would match every topic
	set     bool
}

// parseTopicFilter parses a router pattern; the empty pattern filters
// nothing. An invalid pattern is a permanent error.
func parseTopicFilter(pattern string) (topicFilter, error) {
	if pattern == "" {
		return topicFilter{}, nil
	}
	p, err := address.ParsePattern(pattern)
	if err != nil {
		return topicFilter{}, outbox.Permanent(err)
	}
	return topicFilter{pattern: p, like: topicLike(pattern), set: true}, nil
}

// match reports whether the router pattern matches topic (true when no
// pattern is set).
func (f topicFilter) match(topic string) bool { return !f.set || f.pattern.Match(topic) }

// param is the LIKE pattern as a statement parameter: nil (SQL NULL: no
// filter) when it would match every topic.
func (f topicFilter) param() any {
	if f.like == "" {
		return nil
	}
	return f.like
}

// topicLike translates a valid router pattern into a LIKE pattern (escape
// character \) that matches every topic the router pattern matches, and
// usually few others: literal tokens are escaped ([, %, _ and \ lose their
// LIKE meaning), "*" and "**" become %, which may also match dots (hence a
// superset, which the caller filters in Go). The literal text before the
// first wildcard is a constant prefix, so an index on the topic column is
// sought, not scanned. It returns "" when the pattern starts with a
// wildcard token and has no literal token at all ("*", "**", "*.*"), that
// is, when the LIKE would not narrow anything worth a predicate.
func topicLike(pattern string) string {
	var b strings.Builder
	literal := false
	for i, tok := range strings.Split(pattern, ".") {
		if i > 0 {
			b.WriteByte('.')
		}
		if tok == "*" || tok == "**" {
			b.WriteByte('%')
			continue
		}
		literal = true
		for _, r := range tok {
			switch r {
			case '[', '%', '_', likeEscape:
				b.WriteByte(likeEscape)
			}
			b.WriteRune(r)
		}
	}
	if !literal {
		return ""
	}
	return b.String()
}
