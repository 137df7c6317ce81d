package intake

import (
	"net/textproto"
	"strings"
)

// MaxStoredHeaderBytes bounds the names and values of the headers stored
// with one message; headers past it are left out.
const MaxStoredHeaderBytes = 16 << 10

// notStored are headers never stored with a received message, in
// canonical form: hop-by-hop and transport headers, credentials, and the
// headers queuebox itself sets when it delivers (the identity headers and
// each destination's own), so that a sender can forge none of them on the
// message a handler reads or the relay delivers.
var notStored = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Host": true, "Content-Length": true,
	"Authorization": true, "Proxy-Authorization": true, "Cookie": true, "Set-Cookie": true,
	"X-Message-Id": true, "Idempotency-Key": true, "Nats-Msg-Id": true, "Message_id": true,
	"X-Topic": true, "X-Attempt": true, "X-Message-Key": true, "X-Message-Key-Encoding": true,
	"X-Topic-Encoding": true, "Content-Type": true,
}

// HeaderPolicy decides which received headers are stored.
type HeaderPolicy struct {
	drop map[string]bool // canonical names, beyond notStored
}

// NewHeaderPolicy returns the policy that also drops the named headers
// (a source's API key header, say).
func NewHeaderPolicy(drop ...string) HeaderPolicy {
	p := HeaderPolicy{drop: map[string]bool{}}
	for _, h := range drop {
		if h != "" {
			p.drop[textproto.CanonicalMIMEHeaderKey(h)] = true
		}
	}
	return p
}

// Stored reports whether a header named name (in any case) is stored.
func (p HeaderPolicy) Stored(name string) bool {
	c := textproto.CanonicalMIMEHeaderKey(name)
	if notStored[c] || p.drop[c] || strings.HasPrefix(c, "Nats-") || strings.HasPrefix(c, "Proxy-") {
		return false
	}
	return true
}

// Filter returns the stored headers of h (an http.Header, say), several
// values of one name joined with ", ", within MaxStoredHeaderBytes. Nil
// when none.
func (p HeaderPolicy) Filter(h map[string][]string) map[string]string {
	var out map[string]string
	size := 0
	for name, vals := range h {
		if !p.Stored(name) || len(vals) == 0 {
			continue
		}
		v := strings.Join(vals, ", ")
		if size += len(name) + len(v); size > MaxStoredHeaderBytes {
			break
		}
		if out == nil {
			out = make(map[string]string, len(h))
		}
		out[name] = v
	}
	return out
}
