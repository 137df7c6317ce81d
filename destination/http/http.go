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
//	401, 403                         unavailable (a credential of the whole destination)
//	408, 502, 503, 504               unavailable; Retry-After kept
//	refused, DNS, TLS, reset, timeout unavailable
//	429, 507                         no room; Retry-After kept
//	3xx, 404 and other 4xx, 500      the row failed: an attempt is spent
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
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/router"
)

// Headers sent with every request (contract §4).
const (
	HeaderMessageID      = "X-Message-Id"
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderTopic          = "X-Topic"
	HeaderAttempt        = "X-Attempt"
	HeaderMessageKey     = "X-Message-Key"
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
	// The rendered values are inserted as they are (not escaped).
	URL string
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
	url           *router.Template
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

// reservedHeaders are set by the destination; row headers of these names
// are dropped.
var reservedHeaders = map[string]bool{
	HeaderMessageID: true, HeaderIdempotencyKey: true, HeaderTopic: true, HeaderAttempt: true,
	HeaderMessageKey: true, "Content-Type": true, "Authorization": true, "Host": true,
	"Content-Length": true, "Transfer-Encoding": true, "Connection": true,
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
	tmpl, err := router.ParseTemplate(o.URL)
	if err != nil {
		return nil, fmt.Errorf("http destination %q: url: %w", o.Name, err)
	}
	dialAddr, err := staticDialAddr(o.URL)
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
		dialAddr:      dialAddr,
		headers:       http.Header{},
		timeout:       o.Timeout,
		maxRetryAfter: o.MaxRetryAfter,
		sem:           make(chan struct{}, o.Concurrency),
		log:           log.With("destination", o.Name, "type", "http"),
		closed:        make(chan struct{}),
	}
	for k, v := range o.Headers {
		if reservedHeaders[http.CanonicalHeaderKey(k)] {
			return nil, fmt.Errorf("http destination %q: headers: %s is set by queuebox itself", o.Name, k)
		}
		if !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(v) {
			return nil, fmt.Errorf("http destination %q: headers: %q is not a valid HTTP header name, or its value holds a line break or a control character", o.Name, k)
		}
		d.headers.Set(k, v)
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

// staticDialAddr returns host:port of the URL template when its scheme and
// host are literal, and "" when the host is a template.
func staticDialAddr(src string) (string, error) {
	rest := src
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	} else {
		return "", fmt.Errorf("%q has no scheme (want http:// or https://)", redactURL(src))
	}
	if j := strings.IndexAny(rest, "/?#"); j >= 0 {
		rest = rest[:j]
	}
	if strings.Contains(src[:strings.Index(src, "://")], "{{") {
		return "", fmt.Errorf("the scheme of %q cannot be a template", redactURL(src))
	}
	if strings.Contains(rest, "{{") {
		return "", nil
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
	target, err := d.url.Render(m)
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

// checkHeaders reports a row header, topic or key that HTTP cannot carry
// (a name outside the token characters, a value with a line break or a
// control character): net/http refuses the whole request for it, on every
// attempt. Row headers named like one queuebox sets are dropped instead
// (setHeaders), whatever they hold.
func (d *Destination) checkHeaders(m *outbox.Message) error {
	for k, v := range m.Headers {
		ck := http.CanonicalHeaderKey(k)
		if reservedHeaders[ck] || d.headers.Get(ck) != "" {
			continue
		}
		if !httpguts.ValidHeaderFieldName(k) {
			return outbox.Permanent(fmt.Errorf("http destination %q: row header name %q is not a valid HTTP header name (token characters only)", d.name, k))
		}
		if !httpguts.ValidHeaderFieldValue(v) {
			return outbox.Permanent(fmt.Errorf("http destination %q: row header %s: the value holds a character HTTP headers cannot carry (a line break or a control character)", d.name, k))
		}
	}
	if !httpguts.ValidHeaderFieldValue(m.Topic) {
		return outbox.Permanent(fmt.Errorf("http destination %q: the topic holds a character HTTP headers cannot carry (%s)", d.name, HeaderTopic))
	}
	if !httpguts.ValidHeaderFieldValue(m.Key) {
		return outbox.Permanent(fmt.Errorf("http destination %q: the key holds a character HTTP headers cannot carry (%s)", d.name, HeaderMessageKey))
	}
	return nil
}

func (d *Destination) setHeaders(h http.Header, m *outbox.Message) {
	for k, v := range m.Headers {
		ck := http.CanonicalHeaderKey(k)
		if reservedHeaders[ck] || d.headers.Get(ck) != "" {
			continue
		}
		h.Set(ck, v)
	}
	for k, v := range d.headers {
		h[k] = v
	}
	h.Set("Content-Type", "application/json")
	h.Set(HeaderMessageID, m.ID)
	h.Set(HeaderIdempotencyKey, m.ID)
	h.Set(HeaderTopic, m.Topic)
	h.Set(HeaderAttempt, strconv.Itoa(m.Attempt))
	if m.Key != "" {
		h.Set(HeaderMessageKey, m.Key)
	}
	if d.authValue != "" {
		h.Set("Authorization", d.authValue)
	}
}

// snippet reads at most SnippetLimit bytes of body for the error text,
// redacted and quoted, and discards a bounded rest so that the connection
// can be reused.
func (d *Destination) snippet(body io.Reader) string {
	buf, _ := io.ReadAll(io.LimitReader(body, SnippetLimit+1))
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	truncated := len(buf) > SnippetLimit
	if truncated {
		buf = buf[:SnippetLimit]
	}
	s := strings.TrimSpace(strings.ToValidUTF8(string(buf), "?"))
	if s == "" {
		return ""
	}
	s = strconv.Quote(d.redact(s))
	if truncated {
		s += " (truncated)"
	}
	return s
}

// redact hides the credentials of the destination in s.
func (d *Destination) redact(s string) string {
	for _, secret := range d.secrets {
		if len(secret) >= 3 {
			s = strings.ReplaceAll(s, secret, "[REDACTED]")
		}
	}
	return s
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
