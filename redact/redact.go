// Package redact removes secrets from text before it is logged, stored in
// an outbox row's last_error or exported as a metric label, and bounds its
// length. Redaction always comes before the cut: Bounded for a whole
// string, Head and ReadHead for the start of a longer text (a response
// body), so that a secret the cut would split is masked whole instead of
// leaving its first bytes behind.
package redact

import (
	"io"
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
	// The literal secrets go first: a pattern that matched a secret's
	// middle (a secret such as "ab://cd:ef@gh") would keep its start.
	// Then again, in case a mask formed one.
	s = removeSecrets(s, secrets)
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

// Bounded returns s with secrets removed (String), on one line, cut to at
// most n bytes (Truncate): the bounded, redacted form of a whole external
// string for a log line, an error or last_error. It redacts before it
// cuts, so a secret that straddles byte n is masked, not cut in two.
func Bounded(s string, n int, secrets ...string) string {
	return Truncate(OneLine(String(s, secrets...)), n)
}

// Error formats err for storage (an outbox row's last_error): secrets
// removed, on one line, at most n bytes. A nil err gives "".
func Error(err error, n int, secrets ...string) string {
	if err == nil {
		return ""
	}
	return Bounded(err.Error(), n, secrets...)
}

// ReadLimit is how many bytes of a longer text Head needs to show its
// first n: n plus the longest secret, so that a secret that starts before
// byte n is read whole and masked.
func ReadLimit(n int, secrets ...string) int {
	longest := 0
	for _, s := range secrets {
		longest = max(longest, len(s))
	}
	return max(n, 0) + longest
}

// Head returns at most n bytes from the start of a text, redacted, and
// whether anything was cut. s is the start of the text, at least
// ReadLimit(n, secrets...) bytes of it when the text is longer (more
// reports that it continues past s). Head redacts s, then drops the end
// that could be the start of a secret continuing past s (and a URL
// password not closed by its "@"), then cuts to n bytes on a rune
// boundary.
func Head(s string, more bool, n int, secrets ...string) (string, bool) {
	r := String(s, secrets...)
	if more {
		r = trimPartial(r, secrets)
	}
	if n < 0 {
		n = 0
	}
	if len(r) <= n {
		return r, more
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(r[cut]) {
		cut--
	}
	return r[:cut], true
}

// ReadHead reads the start of r and returns Head of it: at most n bytes,
// redacted, and whether r held more. It reads ReadLimit(n, secrets...)
// bytes and one more; the caller discards (or closes) the rest.
func ReadHead(r io.Reader, n int, secrets ...string) (string, bool, error) {
	limit := ReadLimit(n, secrets...)
	buf, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	more := len(buf) > limit
	if more {
		buf = buf[:limit]
	}
	head, cut := Head(string(buf), more, n, secrets...)
	return head, cut, err
}

// openURLPassword is a URL whose password the end of a cut text leaves
// open: no "@" closes it yet.
var openURLPassword = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://[^\s:@/"'<>]*):[^\s"'<>@/]*$`)

// trimPartial drops the end of s, the start of a text that continues, that
// could be the first bytes of a secret: the longest suffix that is a
// proper prefix of a secret, and the password of a URL not yet closed.
func trimPartial(s string, secrets []string) string {
	s = openURLPassword.ReplaceAllString(s, "${1}:"+Mask)
	cut := len(s)
	for _, sec := range secrets {
		for k := min(len(sec)-1, len(s)); k > 0; k-- {
			if len(s)-k < cut && strings.HasSuffix(s, sec[:k]) {
				cut = len(s) - k
				break
			}
		}
	}
	return s[:cut]
}
