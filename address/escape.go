package address

import (
	"fmt"
	"net/url"
	"strings"
	"unicode"
)

// The escapers below keep a row's values in their place in an address: a
// value is data, and must not add subject tokens or routing-key words, nor
// leave its URL path segment. Each destination applies the one for its
// address with Template.RenderEscaped.

// TokenRule checks a value rendered into a name of dot-separated tokens (a
// NATS subject, an AMQP routing key or exchange).
type TokenRule struct {
	// Span lets a value hold several tokens; wildcards and empty tokens
	// are still refused. Without it a value is exactly one token.
	Span bool
	// Wildcards are the characters that are wildcards in the protocol's
	// names: "*>" for NATS, "*#" for AMQP.
	Wildcards string
}

// Check reports why value cannot stand where the rule applies, or nil.
// Without Span a value is one token: no ".", no whitespace and none of
// the wildcard characters. With Span each of its tokens must be non-empty,
// free of whitespace and not a wildcard.
func (r TokenRule) Check(value string) error {
	if !r.Span {
		for _, c := range value {
			switch {
			case c == '.':
				return fmt.Errorf("value %q holds \".\", which would add tokens: a value is one token", value)
			case unicode.IsSpace(c):
				return fmt.Errorf("value %q holds whitespace", value)
			case strings.ContainsRune(r.Wildcards, c):
				return fmt.Errorf("value %q holds the wildcard %q: a value is one token", value, c)
			}
		}
		return nil
	}
	for tok := range strings.SplitSeq(value, ".") {
		switch {
		case tok == "":
			return fmt.Errorf("value %q has an empty token", value)
		case len(tok) == 1 && strings.Contains(r.Wildcards, tok):
			return fmt.Errorf("value %q holds the wildcard token %q", value, tok)
		case strings.IndexFunc(tok, unicode.IsSpace) >= 0:
			return fmt.Errorf("value %q holds whitespace", value)
		}
	}
	return nil
}

func firstRune(s string) (rune, bool) {
	for _, c := range s {
		return c, true
	}
	return 0, false
}

// URLPart is the part of a URL a placeholder lands in.
type URLPart int

// The parts of a URL template (scheme://authority/path?query#fragment).
const (
	URLScheme    URLPart = iota // before "://": the value may be the whole URL
	URLAuthority                // user, host and port
	URLPath
	URLQuery
	URLFragment
)

func (p URLPart) String() string {
	switch p {
	case URLScheme:
		return "scheme"
	case URLAuthority:
		return "host"
	case URLPath:
		return "path"
	case URLQuery:
		return "query"
	case URLFragment:
		return "fragment"
	}
	return fmt.Sprintf("URLPart(%d)", int(p))
}

// URLParts returns, for each placeholder of t in order, the part of the URL
// it lands in, read from the literal text before it. After a value in the
// scheme, which may hold a scheme and host of its own, the literal text
// that follows is read as if it came after the host
// ("{{ payload.base }}/hooks/{{ key }}": the key is in the path).
func (t *Template) URLParts() []URLPart {
	var out []URLPart
	at := URLScheme
	for _, p := range t.parts {
		if p.field != "" {
			out = append(out, at)
			continue
		}
		if at == URLScheme && len(out) > 0 && !strings.Contains(p.literal, "://") {
			at = URLAuthority
		}
		at = advanceURLPart(at, p.literal)
	}
	return out
}

// advanceURLPart returns the part of a URL the text after lit is in, when
// the text before lit is in at.
func advanceURLPart(at URLPart, lit string) URLPart {
	for lit != "" {
		var i int
		switch at {
		case URLScheme:
			if i = strings.Index(lit, "://"); i < 0 {
				return at
			}
			at, lit = URLAuthority, lit[i+3:]
			continue
		case URLAuthority:
			i = strings.IndexAny(lit, "/?#")
		case URLPath:
			i = strings.IndexAny(lit, "?#")
		case URLQuery:
			i = strings.IndexByte(lit, '#')
		default:
			return at
		}
		if i < 0 {
			return at
		}
		switch lit[i] {
		case '/':
			at = URLPath
		case '?':
			at = URLQuery
		case '#':
			at = URLFragment
		}
		lit = lit[i+1:]
	}
	return at
}

// EscapeURLValue escapes value for the part of a URL it lands in:
//
//   - path: path-escaped as one segment ("/" becomes %2F, "?" %3F, "#"
//     %23, "%" %25), and a value that is "." or ".." has its dots escaped
//     (%2E) so that it cannot form a dot-segment;
//   - query: query-escaped ("&" %26, "=" %3D, "#" %23, a space "+");
//   - fragment: path-escaped (a fragment is never sent);
//   - host: refused when it holds a character that would end the host or
//     start a user name ("/", "?", "#", "@", "\"), whitespace or a control
//     character; otherwise as it is (the rendered host is then checked
//     against the destination's allowedHosts);
//   - scheme: as it is (the value may be the whole URL: the rendered host
//     is checked against allowedHosts).
func EscapeURLValue(part URLPart, value string) (string, error) {
	switch part {
	case URLPath, URLFragment:
		if value == "." || value == ".." {
			return strings.ReplaceAll(value, ".", "%2E"), nil
		}
		return url.PathEscape(value), nil
	case URLQuery:
		return url.QueryEscape(value), nil
	case URLAuthority:
		if i := strings.IndexFunc(value, func(c rune) bool {
			return strings.ContainsRune(`/?#@\`, c) || unicode.IsSpace(c) || unicode.IsControl(c)
		}); i >= 0 {
			c, _ := firstRune(value[i:])
			return "", fmt.Errorf("value %q holds %q, which a URL's host cannot hold", value, c)
		}
	}
	return value, nil
}
