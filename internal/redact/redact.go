// Package redact removes secrets from text before it is logged, stored in
// an outbox row's last_error or exported as a metric label, and bounds its
// length.
package redact

import (
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"
)

// Mask replaces every secret that String removes.
const Mask = "xxxxx"

var (
	// scheme://user:password@ — the password may contain anything but
	// white space and quotes; the greedy match runs to the last "@" so that
	// an unescaped "@" in a password is still hidden.
	urlPassword = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://[^\s:@/"'<>]*):[^\s"'<>]*@`)
	// Authorization header values.
	authValue = regexp.MustCompile(`\b(Bearer|bearer|BEARER|Basic|BASIC)(\s+)[A-Za-z0-9\-._~+/]+=*`)
	// key=value secrets in DSNs and query strings.
	keyValue = regexp.MustCompile(`(?i)\b(password|passwd|pwd|token|secret|api[_-]?key|access[_-]?token)(\s*=\s*)([^\s&;,"']+)`)
)

// String returns s with secrets replaced by Mask: the password of every
// URL (scheme://user:pass@host becomes scheme://user:xxxxx@host), the value
// after "Bearer" or "Basic", key=value pairs such as password=… or token=…,
// and every occurrence of each non-empty literal in secrets. The result
// never contains one of the given secrets, even one that the masking itself
// would recreate; very short secrets therefore also hide ordinary text.
func String(s string, secrets ...string) string {
	s = urlPassword.ReplaceAllString(s, "${1}:"+Mask+"@")
	s = authValue.ReplaceAllString(s, "${1}${2}"+Mask)
	s = keyValue.ReplaceAllString(s, "${1}${2}"+Mask)
	return removeSecrets(s, secrets)
}

func removeSecrets(s string, secrets []string) string {
	var list []string
	for _, sec := range secrets {
		if sec != "" {
			list = append(list, sec)
		}
	}
	if len(list) == 0 {
		return s
	}
	// Longest first, so that a secret containing another is masked whole.
	sort.Slice(list, func(i, j int) bool { return len(list[i]) > len(list[j]) })
	for range 3 {
		if !containsAny(s, list) {
			return s
		}
		s = maskRuns(s, list, Mask)
	}
	// The mask itself keeps forming a secret (a secret such as "xxx"):
	// delete instead, which shortens s on every pass and so terminates.
	for containsAny(s, list) {
		s = maskRuns(s, list, "")
	}
	return s
}

func containsAny(s string, list []string) bool {
	for _, sec := range list {
		if strings.Contains(s, sec) {
			return true
		}
	}
	return false
}

// maskRuns replaces each maximal run of bytes covered by an occurrence of
// any secret with mask.
func maskRuns(s string, list []string, mask string) string {
	covered := make([]bool, len(s))
	for _, sec := range list {
		for i := 0; ; {
			j := strings.Index(s[i:], sec)
			if j < 0 {
				break
			}
			for k := i + j; k < i+j+len(sec); k++ {
				covered[k] = true
			}
			i += j + 1
		}
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		if !covered[i] {
			b.WriteByte(s[i])
			i++
			continue
		}
		b.WriteString(mask)
		for i < len(s) && covered[i] {
			i++
		}
	}
	return b.String()
}

// Ellipsis ends a truncated string.
const Ellipsis = "…"

// Truncate returns s cut to at most n bytes on a rune boundary, ending with
// Ellipsis when anything was cut. With n smaller than the ellipsis, s is cut
// without one; n <= 0 gives "".
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	suffix := Ellipsis
	if n < len(suffix) {
		suffix = ""
	}
	cut := n - len(suffix)
	for cut > 0 && cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + suffix
}

// OneLine returns s on a single line: every line break (\r\n, \n, \r) and
// tab becomes a space, and trailing white space is removed.
func OneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n\t") {
		return s
	}
	s = strings.ReplaceAll(s, "\r\n", " ")
	s = strings.Map(func(r rune) rune {
		switch r {
		case '\r', '\n', '\t':
			return ' '
		}
		return r
	}, s)
	return strings.TrimRight(s, " ")
}

// Error formats err for storage (an outbox row's last_error): secrets
// removed, on one line, at most n bytes. A nil err gives "".
func Error(err error, n int, secrets ...string) string {
	if err == nil {
		return ""
	}
	return Truncate(OneLine(String(err.Error(), secrets...)), n)
}
