package redact

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		secrets []string
		want    string
	}{
		{"dial postgres://app:s3cret@db:5432/app failed", nil, "dial postgres://app:xxxxx@db:5432/app failed"},
		{`connect "amqp://guest:guest@127.0.0.1:5672/": refused`, nil, `connect "amqp://guest:xxxxx@127.0.0.1:5672/": refused`},
		{"amqps://u:p@ss@host/vh", nil, "amqps://u:xxxxx@host/vh"},
		{"https://host/path no userinfo", nil, "https://host/path no userinfo"},
		{"nats://token@host:4222", nil, "nats://token@host:4222"},
		{"Authorization: Bearer eyJhbGciOi.payload.sig", nil, "Authorization: Bearer xxxxx"},
		{"Authorization: Basic dXNlcjpwYXNz==", nil, "Authorization: Basic xxxxx"},
		{"host=db user=app password=hunter2 dbname=x", nil, "host=db user=app password=xxxxx dbname=x"},
		{"sqlserver://db?database=x&password=pw&encrypt=true", nil, "sqlserver://db?database=x&password=xxxxx&encrypt=true"},
		{"the key abcd1234 leaked twice: abcd1234", []string{"abcd1234"}, "the key xxxxx leaked twice: xxxxx"},
		{"nothing secret here", []string{"", "zzzz"}, "nothing secret here"},
		{"abcdef", []string{"abcd", "cdef"}, "xxxxx"},
		{"token is xxxx!", []string{"xxxx"}, "token is !"},
	}
	for _, tt := range tests {
		if got := String(tt.in, tt.secrets...); got != tt.want {
			t.Errorf("String(%q, %q) = %q, want %q", tt.in, tt.secrets, got, tt.want)
		}
	}
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"hello world", 8, "hello…"},
		{"Zoë Zoë Zoë", 6, "Zo…"}, // ë is two bytes: cutting inside it backs off
		{"Zoë Zoë Zoë", 7, "Zoë…"},
		{"abcdef", 2, "ab"},
		{"abcdef", 0, ""},
		{"abcdef", -1, ""},
	}
	for _, tt := range tests {
		got := Truncate(tt.in, tt.n)
		if got != tt.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
		if len(got) > max(tt.n, 0) && len(tt.in) > tt.n {
			t.Errorf("Truncate(%q, %d) is %d bytes", tt.in, tt.n, len(got))
		}
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	if got := OneLine("a\nb\r\nc\rd\te\n"); got != "a b c d e" {
		t.Errorf("OneLine = %q", got)
	}
}

func TestError(t *testing.T) {
	t.Parallel()
	err := errors.New("publish to amqp://u:pw@h/ failed:\nchannel closed")
	if got := Error(err, 1000); got != "publish to amqp://u:xxxxx@h/ failed: channel closed" {
		t.Errorf("Error = %q", got)
	}
	if Error(nil, 10) != "" {
		t.Error("Error(nil) != \"\"")
	}
}

func FuzzString(f *testing.F) {
	f.Add("postgres://app:s3cret@db/app", "s3cret")
	f.Add("Bearer abc.def", "abc.def")
	f.Add("xxxxxxxx", "xxxx")
	f.Add("password=hunter2", "hunter2")
	f.Add("a\nb", "")
	f.Fuzz(func(t *testing.T, s, secret string) {
		out := String(s, secret)
		if len(secret) >= 4 && strings.Contains(out, secret) {
			t.Fatalf("String(%q, %q) = %q still contains the secret", s, secret, out)
		}
		one := OneLine(out)
		if strings.ContainsAny(one, "\r\n") {
			t.Fatalf("OneLine(%q) = %q", out, one)
		}
		for _, n := range []int{0, 1, 3, 10, 100} {
			tr := Truncate(one, n)
			if len(tr) > n {
				t.Fatalf("Truncate(%q, %d) = %q is too long", one, n, tr)
			}
			if utf8.ValidString(one) && !utf8.ValidString(tr) {
				t.Fatalf("Truncate(%q, %d) = %q is not valid UTF-8", one, n, tr)
			}
		}
	})
}

func TestHeadRedactsBeforeItCuts(t *testing.T) {
	t.Parallel()
	const secret = "HdrSecret-7731"
	// The secret starts 8 bytes before the cut at 32.
	body := strings.Repeat("p", 20) + "tok=" + secret + strings.Repeat("q", 100)
	head, cut, err := ReadHead(strings.NewReader(body), 32, secret)
	if err != nil {
		t.Fatal(err)
	}
	if !cut || len(head) > 32 {
		t.Fatalf("ReadHead = %q (cut %v), want at most 32 bytes and cut", head, cut)
	}
	if strings.Contains(head, "HdrS") {
		t.Fatalf("ReadHead = %q keeps the start of the secret", head)
	}
	if want := strings.Repeat("p", 20) + "tok=" + Mask; !strings.HasPrefix(head, want) {
		t.Fatalf("ReadHead = %q, want it to start %q", head, want)
	}
	// The old order, cut then redact, leaves the start behind.
	if old := String(body[:32], secret); !strings.Contains(old, "HdrSec") {
		t.Fatalf("cut-then-redact = %q; the test no longer shows the leak", old)
	}
}

func TestHeadDropsAnOpenEnd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s, want string
		more    bool
	}{
		{"failed: HdrSec", "failed: ", true},        // a secret continuing past the text
		{"failed: HdrSec", "failed: HdrSec", false}, // the whole text: not a secret
		{"dial postgres://app:s3cr", "dial postgres://app:" + Mask, true},
		{"see http://host:8080/x", "see http://host:8080/x", true},
		{"ok HdrSecret-7731 and Hdr", "ok " + Mask + " and ", true},
	}
	for _, tt := range tests {
		if got, _ := Head(tt.s, tt.more, 100, "HdrSecret-7731"); got != tt.want {
			t.Errorf("Head(%q, more %v) = %q, want %q", tt.s, tt.more, got, tt.want)
		}
	}
}

func TestBounded(t *testing.T) {
	t.Parallel()
	s := strings.Repeat("a", 10) + "K3y-S3cret-99\nrest"
	if got := Bounded(s, 16, "K3y-S3cret-99"); got != strings.Repeat("a", 10)+"xxx…" {
		t.Errorf("Bounded = %q", got)
	}
}

// FuzzHead places a secret at every offset around every cut and checks
// that no prefix of it of 4 bytes or more survives in what Head, ReadHead
// and Bounded return, whether the text ends within what was read or
// continues past it.
func FuzzHead(f *testing.F) {
	f.Add("upstream failure; auth=", "HdrSecret-4242")
	f.Add("password=zzzzzzzzzz token=", "s3cr3t-value")
	f.Add("dial postgres://app:", "Pg-S3cret-pw")
	f.Add("Zoë Zoë ", "ëëëë")
	f.Add("", "abab")
	f.Add("ab://cd", "ab://cd:ef@gh")
	f.Fuzz(func(t *testing.T, filler, secret string) {
		if len(secret) < 4 || len(secret) > 32 || strings.Contains(Mask+Ellipsis, secret[:4]) {
			return
		}
		fill := fillerWithout(filler, secret)
		// Every offset at which the secret straddles the cut at n, and
		// one on either side; a text that ends within what Head reads,
		// and one that continues past it.
		for _, n := range []int{1, 64, 256} {
			for o := max(0, n-len(secret)-1); o <= n+1; o++ {
				for _, tail := range []int{0, len(secret) + 16} {
					text := pad(fill, o) + secret + pad(fill, tail)
					limit := ReadLimit(n, secret)
					head, _ := Head(text[:min(len(text), limit)], len(text) > limit, n, secret)
					checkNoPrefix(t, "Head", text, n, head, secret)
					rh, _, _ := ReadHead(strings.NewReader(text), n, secret)
					checkNoPrefix(t, "ReadHead", text, n, rh, secret)
					if tail > 0 {
						checkNoPrefix(t, "Bounded", text, n, Bounded(text, n, secret), secret)
					}
				}
			}
		}
	})
}

// fillerWithout returns s with every byte that the secret holds replaced by
// one it does not hold, so that any prefix of the secret in the output came
// from the secret itself; never empty.
func fillerWithout(s, secret string) string {
	repl := byte('.')
	for _, c := range []byte(". ;=:/@_-0123456789") {
		if !strings.ContainsRune(secret, rune(c)) && c != 'x' {
			repl = c
			break
		}
	}
	b := []byte(s)
	for i, c := range b {
		if strings.IndexByte(secret, c) >= 0 || c >= utf8.RuneSelf {
			b[i] = repl
		}
	}
	if len(b) == 0 {
		b = []byte{repl}
	}
	return string(b)
}

// pad returns n bytes of fill, repeated as needed.
func pad(fill string, n int) string {
	return strings.Repeat(fill, n/len(fill)+1)[:n]
}

func checkNoPrefix(t *testing.T, fn, text string, n int, out, secret string) {
	t.Helper()
	if len(out) > max(n, 0) {
		t.Fatalf("%s(%q, %d) = %q: %d bytes", fn, text, n, out, len(out))
	}
	for k := len(secret); k >= 4; k-- {
		if strings.Contains(out, secret[:k]) {
			t.Fatalf("%s(%q, %d) = %q keeps %q, the first %d bytes of the secret", fn, text, n, out, secret[:k], k)
		}
	}
}
