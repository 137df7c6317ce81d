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
