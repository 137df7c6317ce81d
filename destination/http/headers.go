package httpdest

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/destination/cloudevents"
	"github.com/queuebox/queuebox/outbox"
	"golang.org/x/net/http/httpguts"
)

// reservedHeaders are set by the destination (canonical names); row
// headers of these names are dropped, whatever allowHeaders says.
var reservedHeaders = map[string]bool{
	HeaderMessageID: true, HeaderIdempotencyKey: true, HeaderTopic: true, HeaderAttempt: true,
	HeaderMessageKey: true, HeaderMessageKeyEncoding: true, HeaderTopicEncoding: true, "Content-Type": true,
}

// notStatic are headers of the request itself, which static headers
// cannot set either.
var notStatic = map[string]bool{"Authorization": true, "Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true}

// controlHeaders are dropped from row headers unless allowHeaders names
// them: the hop-by-hop headers (RFC 9110 §7.6.1, and Proxy-Connection and
// Keep-Alive), and those of the request itself (Host, Content-Length,
// Authorization: the destination's auth, or the receiver's choice).
var controlHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Proxy-Connection": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Host": true, "Content-Length": true, "Authorization": true,
}

// dropHeader reports whether row header k is not sent: the headers queuebox
// sets itself and the static headers (always), the hop-by-hop headers,
// Host, Content-Length and Authorization (unless allowHeaders names them),
// Authorization whenever auth is set, the Standard Webhooks headers while
// signing and the CloudEvents headers (ce-*) while sending events.
func (d *Destination) dropHeader(k string) bool {
	ck := http.CanonicalHeaderKey(k)
	switch {
	case reservedHeaders[ck], destination.IsIdentityHeader(k), d.headers.Get(ck) != "":
		return true
	case ck == "Authorization" && (d.authValue != "" || d.tokens != nil):
		return true
	case d.signer != nil && signingHeaders[ck], d.events != nil && cloudevents.InNamespace(k, ceHeaderPrefix):
		return true
	case controlHeaders[ck]:
		return !d.filter.Allowed(k)
	}
	return false
}

// checkHeaders reports a row header that HTTP cannot carry (a name outside
// the token characters, a value with a line break or a control
// character): net/http refuses the whole request for it, on every attempt.
// Row headers the policy drops are not checked (dropHeader). The topic and
// key, queuebox's own headers, are sent percent-encoded instead
// (setHeaders).
func (d *Destination) checkHeaders(m *outbox.Message) error {
	for k, v := range m.Headers {
		if d.dropHeader(k) {
			continue
		}
		if !httpguts.ValidHeaderFieldName(k) {
			return outbox.Permanent(fmt.Errorf("http destination %q: row header name %q is not a valid HTTP header name (token characters only)", d.name, k))
		}
		if !httpguts.ValidHeaderFieldValue(v) {
			return outbox.Permanent(fmt.Errorf("http destination %q: row header %s: the value holds a character HTTP headers cannot carry (a line break or a control character)", d.name, k))
		}
	}
	return nil
}

// needsEncoding reports whether v cannot travel in a header as it is: a
// character HTTP forbids there (a control character other than tab), or
// leading or trailing white space, which receivers strip.
func needsEncoding(v string) bool {
	return !httpguts.ValidHeaderFieldValue(v) || strings.TrimFunc(v, func(c rune) bool { return c == ' ' || c == '\t' }) != v
}

// percentEncode writes every byte of v but the RFC 3986 unreserved
// characters as %XX.
func percentEncode(v string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(v) * 3)
	for i := 0; i < len(v); i++ {
		c := v[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// setEncoded sets header name to v, percent-encoded with encName: percent
// when it needs it.
func setEncoded(h http.Header, name, encName, v string) {
	if needsEncoding(v) {
		h.Set(name, percentEncode(v))
		h.Set(encName, "percent")
		return
	}
	h.Set(name, v)
}

func (d *Destination) setHeaders(h http.Header, m *outbox.Message, out outgoing) (token string, err error) {
	for k, v := range m.Headers {
		if d.dropHeader(k) {
			d.filter.Dropped(k)
			continue
		}
		h.Set(k, v)
	}
	for k, v := range d.headers {
		h[k] = v
	}
	h.Set("Content-Type", cloudevents.DataContentType)
	h.Set(HeaderMessageID, m.ID)
	h.Set(HeaderIdempotencyKey, m.ID)
	setEncoded(h, HeaderTopic, HeaderTopicEncoding, m.Topic)
	h.Set(HeaderAttempt, strconv.Itoa(m.Attempt))
	if m.Key != "" {
		setEncoded(h, HeaderMessageKey, HeaderMessageKeyEncoding, m.Key)
	}
	switch {
	case d.events != nil && d.events.Structured():
		h.Set("Content-Type", cloudevents.ContentTypeStructured)
	case d.events != nil:
		for _, a := range out.attrs {
			h.Set(ceHeaderPrefix+a.Name, cloudevents.HeaderValue(a.Value))
		}
	}
	switch {
	case d.authValue != "":
		h.Set("Authorization", d.authValue)
	case d.tokens != nil:
		if token, err = d.tokens.token(); err != nil {
			return "", err
		}
		h.Set("Authorization", "Bearer "+token)
	}
	if d.signer != nil {
		d.signer.sign(h, m.ID, time.Now().Unix(), out.body)
	}
	return token, nil
}

// ceHeaderPrefix is the prefix of the CloudEvents attributes in HTTP
// headers (binary mode).
const ceHeaderPrefix = "ce-"

// signingHeaders are the Standard Webhooks headers (canonical names).
var signingHeaders = map[string]bool{HeaderWebhookID: true, HeaderWebhookTimestamp: true, HeaderWebhookSignature: true}
