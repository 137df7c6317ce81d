package dialect

import (
	"strings"
	"testing"
)

func TestDecodeHeaders(t *testing.T) {
	for _, tc := range []struct {
		raw     string
		want    map[string]string
		problem string
	}{
		{"", nil, ""},
		{" null ", nil, ""},
		{`{"a": "1", "b": ""}`, map[string]string{"a": "1", "b": ""}, ""},
		{`["a"]`, nil, "not a JSON object"},
		{`{"a": 1}`, nil, `value of "a" is not a string`},
	} {
		got, err := DecodeHeaders([]byte(tc.raw))
		if tc.problem != "" {
			if err == nil || !strings.Contains(err.Error(), tc.problem) {
				t.Errorf("%q: err %v, want %q", tc.raw, err, tc.problem)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("%q: %v, %v; want %v", tc.raw, got, err, tc.want)
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%q: %s = %q, want %q", tc.raw, k, got[k], v)
			}
		}
	}
	if s := Snippet([]byte(strings.Repeat("x", 100))); len(s) > 70 || !strings.HasSuffix(s, "…") {
		t.Errorf("Snippet not cut: %q", s)
	}
}
