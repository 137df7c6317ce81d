package destination

import "strings"

// IdentityHeaders are the names that carry a message's identity on some
// protocol. A row header can never set one of them, whatever a
// destination's allow-list says.
var IdentityHeaders = []string{"Nats-Msg-Id", "X-Message-Id", "Idempotency-Key", "message_id"}

// IsIdentityHeader reports whether name is one of IdentityHeaders, in any
// case.
func IsIdentityHeader(name string) bool {
	for _, id := range IdentityHeaders {
		if strings.EqualFold(name, id) {
			return true
		}
	}
	return false
}

// HeaderFilter carries what the row-header policy of a destination needs
// from its configuration: the allow-list (allowHeaders) that lets named
// broker control headers through, and the callback that reports each row
// header dropped. Each adapter decides which headers are control headers;
// the filter only answers for the allow-list and counts. The zero value
// (or nil) allows nothing and reports nowhere.
type HeaderFilter struct {
	allow  map[string]bool // lower case
	onDrop func(name string)
}

// NewHeaderFilter returns the filter of an allow-list (names in any case)
// and a drop callback (nil: none).
func NewHeaderFilter(allow []string, onDrop func(name string)) *HeaderFilter {
	f := &HeaderFilter{onDrop: onDrop}
	for _, name := range allow {
		if f.allow == nil {
			f.allow = map[string]bool{}
		}
		f.allow[strings.ToLower(name)] = true
	}
	return f
}

// Allowed reports whether name is on the allow-list, in any case. An
// identity header never is.
func (f *HeaderFilter) Allowed(name string) bool {
	if f == nil || len(f.allow) == 0 || IsIdentityHeader(name) {
		return false
	}
	return f.allow[strings.ToLower(name)]
}

// Dropped reports that a row header named name was not sent.
func (f *HeaderFilter) Dropped(name string) {
	if f != nil && f.onDrop != nil {
		f.onDrop(name)
	}
}

// HasPrefixFold reports whether s starts with prefix, in any case.
func HasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// ContainsFold reports whether s contains substr, ASCII letters in any
// case. It allocates nothing: it runs on every header of every message.
func ContainsFold(s, substr string) bool {
	n := len(substr)
	if n == 0 {
		return true
	}
	first := lowerASCII(substr[0])
	for i := 0; i+n <= len(s); i++ {
		if lowerASCII(s[i]) == first && equalFoldASCII(s[i:i+n], substr) {
			return true
		}
	}
	return false
}

// equalFoldASCII reports whether a and b, of the same length, are equal
// with ASCII letters compared without case.
func equalFoldASCII(a, b string) bool {
	for i := 0; i < len(a); i++ {
		if lowerASCII(a[i]) != lowerASCII(b[i]) {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
