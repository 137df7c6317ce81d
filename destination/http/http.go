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
// Opt-in, per destination: Signing signs every request (Standard
// Webhooks), Auth.OAuth2 sends a bearer token from the client credentials
// grant (a 401 drops the cached token and sends once more with a new one),
// CloudEvents sends every row as a CloudEvent (binary: ce-* headers;
// structured: an application/cloudevents+json body).
//
// Messages of one non-empty key are sent one after another in batch order;
// when one fails, the later messages of that key in the batch are not sent
// (they fail with a retryable error) so that order holds. Other messages
// are sent concurrently, at most Concurrency requests at a time for the
// destination.
package httpdest

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/queuebox/queuebox/address"
	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/destination/cloudevents"
	"github.com/queuebox/queuebox/outbox"
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

// Auth is a bearer token, basic credentials or the OAuth2 client
// credentials grant; set one of the three.
type Auth struct {
	Bearer   string
	Username string
	Password string
	OAuth2   *OAuth2
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
	// Signing, when set, signs every request (Standard Webhooks).
	Signing *Signing
	// CloudEvents, when set, sends every row as a CloudEvent in the
	// HTTP binding's binary or structured mode.
	CloudEvents *cloudevents.Options
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
	tokens        *tokens // OAuth2; nil without
	signer        *signer // nil: requests are not signed
	events        *cloudevents.Encoder
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

// New validates o and returns a Destination. It does not contact the
// endpoint (see Check).
func New(_ context.Context, o Options, log *slog.Logger) (*Destination, error) {
	if log == nil {
		log = slog.Default()
	}
	o.setDefaults()
	d := &Destination{
		name:          o.Name,
		filter:        destination.NewHeaderFilter(o.AllowHeaders, o.OnDroppedHeader),
		headers:       http.Header{},
		timeout:       o.Timeout,
		maxRetryAfter: o.MaxRetryAfter,
		sem:           make(chan struct{}, o.Concurrency),
		log:           log.With("destination", o.Name, "type", "http"),
		closed:        make(chan struct{}),
	}
	if err := d.setURL(o); err != nil {
		return nil, fmt.Errorf("http destination %q: %w", o.Name, err)
	}
	if err := d.setStaticHeaders(o.Headers); err != nil {
		return nil, fmt.Errorf("http destination %q: headers: %w", o.Name, err)
	}
	d.transport, d.client = newClient(o)
	if err := d.setAuth(o.Auth); err != nil {
		return nil, fmt.Errorf("http destination %q: auth: %w", o.Name, err)
	}
	if err := d.setWire(o); err != nil {
		return nil, fmt.Errorf("http destination %q: %w", o.Name, err)
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
	return d, nil
}

func (o *Options) setDefaults() {
	if o.Name == "" {
		o.Name = "http"
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
}

// setURL parses the URL template: where each placeholder lands, the
// allowed hosts when the scheme or host is a template, and the address
// Check dials when it is not.
func (d *Destination) setURL(o Options) error {
	if o.URL == "" {
		return errors.New("url is required")
	}
	tmpl, err := address.ParseTemplate(o.URL)
	if err != nil {
		return fmt.Errorf("url: %w", err)
	}
	d.url, d.urlParts = tmpl, tmpl.URLParts()
	hostTemplate := slices.ContainsFunc(d.urlParts, func(p address.URLPart) bool { return p == address.URLScheme || p == address.URLAuthority })
	if hostTemplate && len(o.AllowedHosts) == 0 {
		return fmt.Errorf("url: %q renders the scheme or host from the row: set allowedHosts to the hosts it may send to, or write the host literally", redactURL(o.URL))
	}
	if hostTemplate {
		for _, h := range o.AllowedHosts {
			if err := checkAllowedHost(h); err != nil {
				return fmt.Errorf("allowedHosts: %w", err)
			}
			d.allowedHosts = append(d.allowedHosts, strings.ToLower(h))
		}
	}
	if d.dialAddr, err = staticDialAddr(o.URL, hostTemplate); err != nil {
		return fmt.Errorf("url: %w", err)
	}
	return nil
}

// setStaticHeaders checks and keeps the headers of every request; a value
// long enough to be a credential is redacted from error texts.
func (d *Destination) setStaticHeaders(headers map[string]string) error {
	for k, v := range headers {
		if ck := http.CanonicalHeaderKey(k); reservedHeaders[ck] || notStatic[ck] {
			return fmt.Errorf("%s is set by queuebox itself", k)
		}
		if !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(v) {
			return fmt.Errorf("%q is not a valid HTTP header name, or its value holds a line break or a control character", k)
		}
		d.headers.Set(k, v)
		if len(v) >= minHeaderSecret {
			// An operator's static header is often a credential: a
			// receiver that echoes it must not put it in an error.
			d.secrets = append(d.secrets, v)
		}
	}
	return nil
}

// setAuth sets the Authorization value of a bearer token or basic
// credentials.
func (d *Destination) setAuth(a *Auth) error {
	if a == nil {
		return nil
	}
	switch {
	case a.OAuth2 != nil && (a.Bearer != "" || a.Username != "" || a.Password != ""):
		return errors.New("set oauth2, bearer or username/password, not two of them")
	case a.OAuth2 != nil:
		client := &http.Client{Transport: d.transport, Timeout: d.timeout}
		t, err := newTokens(d.name, a.OAuth2, client)
		if err != nil {
			return err
		}
		d.tokens = t
		d.secrets = append(d.secrets, t.secrets...)
	case a.Bearer != "" && (a.Username != "" || a.Password != ""):
		return errors.New("set bearer or username/password, not both")
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
	return nil
}

// setWire sets what every request carries beyond the row: a signature,
// a CloudEvent.
func (d *Destination) setWire(o Options) error {
	if o.Signing != nil {
		sg, secrets, err := newSigner(o.Signing)
		if err != nil {
			return fmt.Errorf("signing: %w", err)
		}
		d.signer = sg
		d.secrets = append(d.secrets, secrets...)
	}
	if o.CloudEvents != nil {
		e, err := cloudevents.New(*o.CloudEvents)
		if err != nil {
			return err
		}
		d.events = e
	}
	return nil
}

// newClient returns the transport and client of the destination: redirects
// are not followed (a 3xx is a failure that names its Location).
func newClient(o Options) (*http.Transport, *http.Client) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Keep a connection per request in flight: the default's 100 idle
	// connections in all would close the rest after each answer, and a
	// receiver served at a few hundred requests at once would pay a new
	// connection for most of them.
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = o.Concurrency
	tr.MaxConnsPerHost = 0
	if o.TLS != nil {
		tr.TLSClientConfig = o.TLS
	}
	return tr, &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// minHeaderSecret is the shortest static header value treated as a secret
// in error texts: shorter ones ("1", "json") would only mask ordinary text.
const minHeaderSecret = 6

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
