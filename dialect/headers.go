package dialect

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// DecodeHeaders turns a row's stored headers (a JSON object of strings, as
// JSONB or NVARCHAR text) into a map. Empty or null is no headers. Anything
// else leaves the map nil and returns the reason: a dialect sets it as the
// message's Malformed error, so the engine dead-letters that row instead of
// failing the whole claim.
func DecodeHeaders(raw []byte) (map[string]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) || bytes.Equal(raw, []byte("{}")) {
		return nil, nil // the column's default, on most rows: no decoder
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("malformed headers: not a JSON object: %s", Snippet(raw))
	}
	h := make(map[string]string, len(obj))
	for k, v := range obj {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, fmt.Errorf("malformed headers: value of %q is not a string: %s", k, Snippet(v))
		}
		h[k] = s
	}
	return h, nil
}

// Snippet is b cut to 64 bytes for an error message.
func Snippet(b []byte) string {
	const n = 64
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
