// Package httpdest is the HTTP (webhook) destination: each outbox message is
// POSTed, body = payload bytes, to a URL rendered from a template, with the
// row id in X-Message-Id and Idempotency-Key so that the receiver can
// deduplicate redeliveries. The package lives in destination/http but is
// named httpdest so that it does not shadow net/http where both are used.
//
// Outcome per message (see statusError and transportError, and the table
// in docs/destinations/http.md):
//
//	2xx                              success
//	400, 410, 413, 414, 422, 431     permanent: the row goes dead at once, reason kept
//	a row header HTTP cannot carry   permanent, before the request
//	a rendered host not allowed      permanent, before the request
//	401, 403                         unavailable (a credential of the whole destination)
//	408, 502, 503, 504               unavailable; Retry-After kept
//	refused, DNS, TLS, reset, timeout unavailable
//	429, 507                         no room; Retry-After kept
//	3xx, 404 and other 4xx, 500      the row failed: an attempt is spent
//
// Row values rendered into the URL are escaped for where they land (a path
// segment, the query; address.EscapeURLValue); a template in the scheme or
// host needs AllowedHosts. Row headers follow the policy of dropHeader; a
// topic or key that a header cannot carry is sent percent-encoded.
//
// Messages of one non-empty key are sent one after another in batch order;
// when one fails, the later messages of that key in the batch are not sent
// (they fail with a retryable error) so that order holds. Other messages
// are sent concurrently, at most Concurrency requests at a time for the
// destination.
package httpdest

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/queuebox/queuebox/address"
	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/redact"
)

// Headers sent with every request.
const (
	HeaderMessageID      = "X-Message-Id"
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderTopic          = "X-Topic"
	HeaderAttempt        = "X-Attempt"
	HeaderMessageKey     = "X-Message-Key"
	// HeaderMessageKeyEncoding and HeaderTopicEncoding are "percent" when
	// the key (topic) holds what an HTTP header cannot carry as it is (a
	// control character, a leading or trailing space): the header then
	// carries it percent-encoded (RFC 3986: every byte but A-Z a-z 0-9 -
	// . _ ~ as %XX). Absent otherwise.
	HeaderMessageKeyEncoding = "X-Message-Key-Encoding"
	HeaderTopicEncoding      = "X-Topic-Encoding"
)

// Defaults applied by New.
const (
	DefaultTimeout       = 10 * time.Second
	DefaultConcurrency   = 8
	DefaultMaxRetryAfter = 5 * time.Minute
	// SnippetLimit is how many bytes of a failed response's body go into
	// the error.
	SnippetLimit = 256
)

// Auth is a bearer token or basic credentials; set one of the two.
type Auth struct {
	Bearer   string
	Username string
	Password string
}

// Options configures a Destination; the fields map one to one onto the
// `type: http` destination keys of the configuration.
type Options struct {
	// Name is the destination's name in the configuration.
	Name string
	// URL is the URL template, e.g. "https://hooks.example/{{ topic }}".
	// A value in a path segment is path-escaped ("/" is %2F; "." and ".."
	// are %2E and %2E%2E), a value in the query query-escaped; the
	// fragment is never sent. A template in the scheme or host needs
	// AllowedHosts.
	URL string
	// AllowedHosts are the hosts a URL whose scheme or host is a template
	// may render ("hooks.example.com", "*.example.com" for any subdomain,
	// "host:port" for one port only). A row whose rendered host is not
	// one of them is dead, with the reason.
	AllowedHosts []string
	// AllowHeaders are row headers sent although the policy drops them
	// (a hop-by-hop header, Authorization without auth), in any case.
	// Identity headers, the headers queuebox sets and the static Headers
	// are never replaced by a row.
	AllowHeaders []string
	// OnDroppedHeader is called with the name of each row header not
	// sent (nil: not reported).
	OnDroppedHeader func(name string)
	// Secrets are removed from error texts before they are bounded (a
	// response body's first SnippetLimit bytes), besides the destination's
	// own credentials and static header values.
	Secrets []string
	// Timeout bounds each request. 0: DefaultTimeout.
	Timeout time.Duration
	// Headers are static headers added to every request. Row headers
	// cannot override them nor the headers of the contract.
	Headers map[string]string
	Auth    *Auth
	// Concurrency bounds the requests in flight for the destination.
	// 0: DefaultConcurrency.
	Concurrency int
	// MaxRetryAfter caps a receiver's Retry-After. 0: DefaultMaxRetryAfter.
	MaxRetryAfter time.Duration
	TLS           *tls.Config // nil: the system roots
}

// Destination POSTs messages to an HTTP endpoint. It is safe for
// concurrent use.
type Destination struct {
	name          string
	url           *address.Template
	urlParts      []address.URLPart // where each placeholder of url lands
	allowedHosts  []string          // lower case; empty: the host is literal
	filter        *destination.HeaderFilter
	dialAddr      string // host:port for Check; "" when the host is a template
	client        *http.Client
	transport     *http.Transport
	headers       http.Header
	authValue     string
	secrets       []string
	timeout       time.Duration
	maxRetryAfter time.Duration
	sem           chan struct{}
	log           *slog.Logger

	closeOnce sync.Once
	closed    chan struct{}
}

var (
	_ destination.Destination = (*Destination)(nil)
	_ destination.Streamer    = (*Destination)(nil)
	_ destination.Checker     = (*Destination)(nil)
)

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("http destination is closed")

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

// New validates o and returns a Destination. It does not contact the
// endpoint (see Check).
func New(_ context.Context, o Options, log *slog.Logger) (*Destination, error) {
	if log == nil {
		log = slog.Default()
	}
	if o.Name == "" {
		o.Name = "http"
	}
	if o.URL == "" {
		return nil, fmt.Errorf("http destination %q: url is required", o.Name)
	}
	tmpl, err := address.ParseTemplate(o.URL)
	if err != nil {
		return nil, fmt.Errorf("http destination %q: url: %w", o.Name, err)
	}
	parts := tmpl.URLParts()
	hostTemplate := slices.ContainsFunc(parts, func(p address.URLPart) bool { return p == address.URLScheme || p == address.URLAuthority })
	if hostTemplate && len(o.AllowedHosts) == 0 {
		return nil, fmt.Errorf("http destination %q: url: %q renders the scheme or host from the row: set allowedHosts to the hosts it may send to, or write the host literally", o.Name, redactURL(o.URL))
	}
	var allowed []string
	if hostTemplate {
		for _, h := range o.AllowedHosts {
			if err := checkAllowedHost(h); err != nil {
				return nil, fmt.Errorf("http destination %q: allowedHosts: %w", o.Name, err)
			}
			allowed = append(allowed, strings.ToLower(h))
		}
	}
	dialAddr, err := staticDialAddr(o.URL, hostTemplate)
	if err != nil {
		return nil, fmt.Errorf("http destination %q: url: %w", o.Name, err)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.MaxRetryAfter <= 0 {
		o.MaxRetryAfter = DefaultMaxRetryAfter
	}
	d := &Destination{
		name:          o.Name,
		url:           tmpl,
		urlParts:      parts,
		allowedHosts:  allowed,
		filter:        destination.NewHeaderFilter(o.AllowHeaders, o.OnDroppedHeader),
		dialAddr:      dialAddr,
		headers:       http.Header{},
		timeout:       o.Timeout,
		maxRetryAfter: o.MaxRetryAfter,
		sem:           make(chan struct{}, o.Concurrency),
		log:           log.With("destination", o.Name, "type", "http"),
		closed:        make(chan struct{}),
	}
	for k, v := range o.Headers {
		if ck := http.CanonicalHeaderKey(k); reservedHeaders[ck] || notStatic[ck] {
			return nil, fmt.Errorf("http destination %q: headers: %s is set by queuebox itself", o.Name, k)
		}
		if !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(v) {
			return nil, fmt.Errorf("http destination %q: headers: %q is not a valid HTTP header name, or its value holds a line break or a control character", o.Name, k)
		}
		d.headers.Set(k, v)
		if len(v) >= minHeaderSecret {
			// An operator's static header is often a credential: a
			// receiver that echoes it must not put it in an error.
			d.secrets = append(d.secrets, v)
		}
	}
	if a := o.Auth; a != nil {
		switch {
		case a.Bearer != "" && (a.Username != "" || a.Password != ""):
			return nil, fmt.Errorf("http destination %q: auth: set bearer or username/password, not both", o.Name)
		case a.Bearer != "":
			d.authValue = "Bearer " + a.Bearer
			d.secrets = append(d.secrets, a.Bearer)
		case a.Username != "" || a.Password != "":
			cred := base64.StdEncoding.EncodeToString([]byte(a.Username + ":" + a.Password))
			d.authValue = "Basic " + cred
			d.secrets = append(d.secrets, cred)
			if a.Password != "" {
				d.secrets = append(d.secrets, a.Password)
			}
		}
	}
	if u, err := url.Parse(o.URL); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			d.secrets = append(d.secrets, p)
		}
	}
	for _, sec := range o.Secrets {
		if sec != "" {
			d.secrets = append(d.secrets, sec)
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = o.Concurrency
	tr.MaxConnsPerHost = 0
	if o.TLS != nil {
		tr.TLSClientConfig = o.TLS
	}
	d.transport = tr
	d.client = &http.Client{
		Transport: tr,
		// Redirects are not followed: a 3xx is reported as a failure that
		// names its Location.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return d, nil
}

// minHeaderSecret is the shortest static header value treated as a secret
// in error texts: shorter ones ("1", "json") would only mask ordinary text.
const minHeaderSecret = 6

// checkAllowedHost reports an allowedHosts entry that is not a host name,
// "*." and a domain, or either with ":port".
func checkAllowedHost(h string) error {
	if h == "" || strings.ContainsAny(h, "/?#@ \t") || strings.Contains(h, "://") {
		return fmt.Errorf("%q is not a host name (write hooks.example.com, *.example.com or host:port)", h)
	}
	if strings.Contains(h[1:], "*") || (strings.HasPrefix(h, "*") && !strings.HasPrefix(h, "*.")) {
		return fmt.Errorf("%q: a wildcard is only \"*.\" before a domain (*.example.com)", h)
	}
	return nil
}

// hostAllowed reports whether u's host is one of allowed: the same host
// name (any case) and, for an entry with a port, the same port; "*.d"
// allows any name ending in ".d".
func hostAllowed(u *url.URL, allowed []string) bool {
	host, port := strings.ToLower(u.Hostname()), u.Port()
	for _, a := range allowed {
		ah, ap := a, ""
		if h, p, err := net.SplitHostPort(a); err == nil {
			ah, ap = strings.Trim(h, "[]"), p
		}
		if ap != "" && ap != port {
			continue
		}
		if suffix, ok := strings.CutPrefix(ah, "*"); ok {
			if strings.HasSuffix(host, suffix) && len(host) > len(suffix) {
				return true
			}
			continue
		}
		if host == ah {
			return true
		}
	}
	return false
}

// staticDialAddr returns host:port of the URL template when its scheme and
// host are literal, and "" when the host is a template (hostTemplate).
func staticDialAddr(src string, hostTemplate bool) (string, error) {
	if hostTemplate {
		return "", nil
	}
	if !strings.Contains(src, "://") {
		return "", fmt.Errorf("%q has no scheme (want http:// or https://)", redactURL(src))
	}
	u, err := url.Parse(strings.ReplaceAll(strings.ReplaceAll(src, "{{", "x"), "}}", "x"))
	if err != nil {
		return "", fmt.Errorf("%q: %v", redactURL(src), err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%q: scheme %q is not http or https", redactURL(src), u.Scheme)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

// Publish POSTs every message, at most Concurrency at a time, messages of
// one key in batch order, and reports the outcome per message.
func (d *Destination) Publish(ctx context.Context, msgs []outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	select {
	case <-d.closed:
		return fmt.Errorf("http destination %q: %w", d.name, ErrClosed)
	default:
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("http destination %q: not sent: %w", d.name, err)
	}
	errs := make([]error, len(msgs))
	d.PublishEach(ctx, msgs, func(i int, err error) { errs[i] = err })
	return destination.NewBatchError(errs)
}

// PublishEach POSTs every message as Publish does, and calls done for each
// as soon as its response (or failure) is known: a receiver slow to answer
// one request holds back only that message, and the later ones of its key.
func (d *Destination) PublishEach(ctx context.Context, msgs []outbox.Message, done func(i int, err error)) {
	if len(msgs) == 0 {
		return
	}
	var unusable error
	select {
	case <-d.closed:
		unusable = fmt.Errorf("http destination %q: %w", d.name, ErrClosed)
	default:
		if err := ctx.Err(); err != nil {
			unusable = fmt.Errorf("http destination %q: not sent: %w", d.name, err)
		}
	}
	if unusable != nil {
		for i := range msgs {
			done(i, unusable)
		}
		return
	}
	// Group by key: one sequential lane per non-empty key, one lane per
	// unkeyed message.
	var lanes [][]int
	byKey := map[string]int{}
	for i := range msgs {
		k := msgs[i].Key
		if k == "" {
			lanes = append(lanes, []int{i})
			continue
		}
		if l, ok := byKey[k]; ok {
			lanes[l] = append(lanes[l], i)
			continue
		}
		byKey[k] = len(lanes)
		lanes = append(lanes, []int{i})
	}
	// At most Concurrency goroutines per batch take lanes from a queue (one
	// goroutine per message grew a fresh stack through net/http for every
	// request: ~7 % of the relay's CPU); d.sem bounds the requests in
	// flight across the batches published at once.
	queue := make(chan []int, len(lanes))
	for _, lane := range lanes {
		queue <- lane
	}
	close(queue)
	var wg sync.WaitGroup
	for range min(len(lanes), cap(d.sem)) {
		wg.Go(func() {
			for lane := range queue {
				d.sendLane(ctx, msgs, lane, done)
			}
		})
	}
	wg.Wait()
}

// sendLane sends the messages of one lane (one key) in order; after a
// failure the lane's later messages are not sent.
func (d *Destination) sendLane(ctx context.Context, msgs []outbox.Message, lane []int, done func(int, error)) {
	for n, i := range lane {
		err := d.send(ctx, &msgs[i])
		done(i, err)
		if err != nil && n+1 < len(lane) {
			for _, j := range lane[n+1:] {
				done(j, fmt.Errorf("http destination %q: not sent: message %s of key %q earlier in the batch failed", d.name, msgs[i].ID, msgs[i].Key))
			}
			return
		}
	}
}

func (d *Destination) send(ctx context.Context, m *outbox.Message) error {
	if err := d.checkHeaders(m); err != nil {
		return err
	}
	select {
	case d.sem <- struct{}{}:
		defer func() { <-d.sem }()
	case <-ctx.Done():
		return fmt.Errorf("http destination %q: not sent: %w", d.name, ctx.Err())
	case <-d.closed:
		return fmt.Errorf("http destination %q: %w", d.name, ErrClosed)
	}
	target, err := d.url.RenderEscaped(m, d.urlValue)
	if err != nil {
		return fmt.Errorf("http destination %q: url: %w", d.name, err)
	}
	rctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	// NewRequest parses the URL once; the checks read its result. The
	// redacted form for messages is made only when there is one to write
	// (each parse showed in the profile of an HTTP drain).
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, target, bytes.NewReader(m.Payload))
	if err != nil || (req.URL.Scheme != "http" && req.URL.Scheme != "https") || req.URL.Host == "" {
		return outbox.Permanent(fmt.Errorf("http destination %q: rendered url %q is not a valid http(s) URL", d.name, redactURL(target)))
	}
	if d.allowedHosts != nil && !hostAllowed(req.URL, d.allowedHosts) {
		return outbox.Permanent(fmt.Errorf("http destination %q: rendered url %q: host %q is not in allowedHosts", d.name, redactURL(target), req.URL.Host))
	}
	// The fragment is the client's: never sent.
	req.URL.Fragment, req.URL.RawFragment = "", ""
	req.Header = make(http.Header, len(m.Headers)+len(d.headers)+8) // sized once: no map growth per request
	d.setHeaders(req.Header, m)

	resp, err := d.client.Do(req)
	if err != nil {
		return d.transportError(ctx, rctx, redactURL(target), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil
	}
	snippet := d.snippet(resp.Body)
	return d.statusError(resp, redactURL(target), snippet)
}

// urlValue escapes a value for the part of the URL it lands in.
func (d *Destination) urlValue(i int, _, v string) (string, error) {
	return address.EscapeURLValue(d.urlParts[i], v)
}

// dropHeader reports whether row header k is not sent: the headers queuebox
// sets itself and the static headers (always), the hop-by-hop headers,
// Host, Content-Length and Authorization (unless allowHeaders names them),
// and Authorization whenever auth is set.
func (d *Destination) dropHeader(k string) bool {
	ck := http.CanonicalHeaderKey(k)
	switch {
	case reservedHeaders[ck], destination.IsIdentityHeader(k), d.headers.Get(ck) != "":
		return true
	case ck == "Authorization" && d.authValue != "":
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

func (d *Destination) setHeaders(h http.Header, m *outbox.Message) {
	for k, v := range m.Headers {
		if d.dropHeader(k) {
			d.filter.Dropped(k)
			continue
		}
		h.Set(http.CanonicalHeaderKey(k), v)
	}
	for k, v := range d.headers {
		h[k] = v
	}
	h.Set("Content-Type", "application/json")
	h.Set(HeaderMessageID, m.ID)
	h.Set(HeaderIdempotencyKey, m.ID)
	setEncoded(h, HeaderTopic, HeaderTopicEncoding, m.Topic)
	h.Set(HeaderAttempt, strconv.Itoa(m.Attempt))
	if m.Key != "" {
		setEncoded(h, HeaderMessageKey, HeaderMessageKeyEncoding, m.Key)
	}
	if d.authValue != "" {
		h.Set("Authorization", d.authValue)
	}
}

// snippet returns at most SnippetLimit bytes of body for the error text,
// redacted before it is cut (redact.ReadHead reads enough past the limit
// to mask a secret the cut would split) and quoted, and discards a bounded
// rest so that the connection can be reused.
func (d *Destination) snippet(body io.Reader) string {
	head, truncated, _ := redact.ReadHead(body, SnippetLimit, d.secrets...)
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	s := strings.TrimSpace(strings.ToValidUTF8(head, "?"))
	if s == "" {
		return ""
	}
	s = strconv.Quote(s)
	if truncated {
		s += " (truncated)"
	}
	return s
}

// redact hides the credentials of the destination, and the configured
// secrets, in s.
func (d *Destination) redact(s string) string {
	return redact.String(s, d.secrets...)
}

// sensitiveQuery are query parameter names whose values are hidden in
// errors and logs.
var sensitiveQuery = []string{"token", "secret", "password", "passwd", "key", "sig", "signature", "auth", "code"}

// redactURL hides the password and sensitive query values of a URL.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		if i := strings.LastIndex(s, "@"); i >= 0 {
			if j := strings.Index(s, "://"); j >= 0 && j < i {
				return s[:j+3] + "[REDACTED]" + s[i:]
			}
		}
		return s
	}
	if u.RawQuery != "" {
		q := u.Query()
		for name := range q {
			ln := strings.ToLower(name)
			for _, sq := range sensitiveQuery {
				if strings.Contains(ln, sq) {
					q.Set(name, "REDACTED")
				}
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// Check dials the endpoint's host (TCP only). An HTTP request is not made:
// a HEAD or OPTIONS on a webhook may be unsupported or have side effects.
// When the host is a template, Check only reports whether the destination
// is open.
func (d *Destination) Check(ctx context.Context) error {
	select {
	case <-d.closed:
		return ErrClosed
	default:
	}
	if d.dialAddr == "" {
		return nil
	}
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", d.dialAddr)
	if err != nil {
		return outbox.Unavailable(fmt.Errorf("http destination %q: cannot connect to %s: %w", d.name, d.dialAddr, err))
	}
	return conn.Close()
}

// Close stops new requests and closes idle connections. It is idempotent.
func (d *Destination) Close() error {
	d.closeOnce.Do(func() {
		close(d.closed)
		d.transport.CloseIdleConnections()
	})
	return nil
}
