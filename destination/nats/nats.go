// Package nats is the NATS JetStream destination: each outbox message is
// published asynchronously to a subject rendered from a template, with the
// row id in the Nats-Msg-Id header so that JetStream's duplicate window
// absorbs redeliveries. A batch is published as a whole within a bounded
// window of outstanding acks, then every PubAck is awaited; the outcome is
// reported per message.
//
// Each message's outcome is reported as soon as its PubAck comes
// (PublishEach). Failures are classified by error value and JetStream API
// code, never by text (classify, and the table in
// docs/destinations/nats.md): what NATS cannot carry (an invalid or
// over-long subject, headers or a message over a limit) is permanent and
// checked before the publish where the client can know it; a stream,
// account or server at its JetStream limits is no room; the connection
// down, no PubAck in time or JetStream not answering is unavailable.
package nats

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/queuebox/queuebox/address"
	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/destination/cloudevents"
	"github.com/queuebox/queuebox/outbox"
)

// Headers sent with every message.
const (
	HeaderMsgID      = "Nats-Msg-Id"
	HeaderTopic      = "X-Topic"
	HeaderAttempt    = "X-Attempt"
	HeaderMessageKey = "X-Message-Key"
)

// Defaults applied by New.
const (
	DefaultMaxPending    = 1024
	DefaultAckTimeout    = 30 * time.Second
	DefaultReconnectWait = 2 * time.Second
	DefaultConnectWait   = 5 * time.Second
)

// Options configures a Destination. The fields map one to one onto the
// `type: nats` destination keys of the configuration.
type Options struct {
	// Name is the destination's name in the configuration; it appears in
	// logs, errors and the NATS connection name.
	Name string
	// Servers are NATS URLs; credentials in them are never logged.
	Servers []string
	// Subject is the subject template ({{ topic }}, {{ key }}, ...).
	Subject string
	// SubjectFrom picks the subject from a row column instead:
	// "topic", "key" or "aggregate_type". Exclusive with Subject.
	SubjectFrom string
	Token       string
	CredsFile   string
	TLS         *tls.Config // nil: no TLS unless a tls:// URL
	// MaxPending bounds the outstanding asynchronous publishes of the
	// destination (shared by concurrent Publish calls). 0: DefaultMaxPending.
	MaxPending int
	// Stream, when set, is checked (or, with CreateStream, created) at New
	// and is the stream DuplicateWindow reports on.
	Stream         string
	CreateStream   bool
	StreamSubjects []string
	// CheckOnly makes New change nothing on the server (queuebox check):
	// a missing stream that CreateStream would create is left missing and
	// reported by StreamToCreate instead.
	CheckOnly bool
	// AckTimeout bounds the wait for one PubAck independently of ctx.
	// 0: DefaultAckTimeout.
	AckTimeout time.Duration
	// ReconnectWait is the pause between reconnect attempts.
	// 0: DefaultReconnectWait.
	ReconnectWait time.Duration
	// ConnectTimeout bounds each dial. 0: DefaultConnectWait.
	ConnectTimeout time.Duration
	// SubjectTokens lets a value rendered into the subject span several
	// tokens (config subjectTokens: allow). Off, each value of the
	// template other than {{ topic }} must be one token: a value with a
	// ".", whitespace, "*" or ">" makes the row dead with the reason.
	SubjectTokens bool
	// AllowHeaders are row headers sent although the policy drops them
	// (a Nats-* header, say), in any case. Identity headers and any header
	// naming Msg-Id are never sent.
	AllowHeaders []string
	// OnDroppedHeader is called with the name of each row header not
	// sent (nil: not reported).
	OnDroppedHeader func(name string)
	// Secrets are removed from the text of errors that quote a bounded
	// part of a row value (a subject too long to show whole).
	Secrets []string
	// CloudEvents, when set, sends every row as a CloudEvent in the NATS
	// binding's binary (ce-* headers) or structured mode.
	CloudEvents *cloudevents.Options
}

// Destination publishes to NATS JetStream. It is safe for concurrent use.
type Destination struct {
	name    string
	subject *address.Template
	tokens  address.TokenRule
	headers *destination.HeaderFilter
	secrets []string
	stream  string
	nc      *nats.Conn
	js      jetstream.JetStream
	sem     chan struct{}
	// deniedSem holds the futures of refused publishes, which resolve
	// only when their ack times out: a refused message moves its window
	// slot here, so that refusals do not shrink the window unless
	// MaxPending of them are outstanding at once.
	deniedSem chan struct{}
	log       *slog.Logger
	servers   string // redacted, for messages
	denied    *denials

	closeOnce sync.Once
	closed    chan struct{}

	// subjectStream is the stream found covering the static subject when
	// no stream is configured, looked up once for StreamWarning and
	// DuplicateWindow (both asked at the relay's start).
	subjectStreamMu sync.Mutex
	subjectStream   string

	// toCreate is the stream a CheckOnly New found missing, which New
	// without CheckOnly creates.
	toCreate string

	// lookups remembers the JetStream lookups that classify failures.
	lookups lookups

	events *cloudevents.Encoder // nil: rows are not sent as CloudEvents
}

var (
	_ destination.Destination = (*Destination)(nil)
	_ destination.Streamer    = (*Destination)(nil)
	_ destination.Checker     = (*Destination)(nil)
)

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("nats destination is closed")

// subjectFromTemplates maps subjectFrom values onto templates.
var subjectFromTemplates = map[string]string{
	"topic":          "{{ topic }}",
	"key":            "{{ key }}",
	"aggregate_type": "{{ aggregateType }}",
	"aggregateType":  "{{ aggregateType }}",
}

// New connects to NATS and returns a Destination. The first connection
// must succeed (the error names the servers); later disconnects are
// reconnected forever and logged. With CreateStream, the stream is created
// when missing.
func New(ctx context.Context, o Options, log *slog.Logger) (*Destination, error) {
	if log == nil {
		log = slog.Default()
	}
	o.setDefaults()
	log = log.With("destination", o.Name, "type", "nats")
	tmpl, err := subjectTemplate(o)
	if err != nil {
		return nil, err
	}
	var events *cloudevents.Encoder
	if o.CloudEvents != nil {
		if events, err = cloudevents.New(*o.CloudEvents); err != nil {
			return nil, fmt.Errorf("nats destination %q: %w", o.Name, err)
		}
	}
	servers := redactURLs(o.Servers)
	denied := newDenials(o.AckTimeout)
	nc, err := nats.Connect(strings.Join(o.Servers, ","), connOptions(o, log, denied)...)
	if err != nil {
		return nil, fmt.Errorf("nats destination %q: connect to %s: %w (check servers, and that nats-server is running and reachable)", o.Name, servers, err)
	}
	// jetstream's table of outstanding publishes holds the window and the
	// refused publishes still waiting for their ack to time out
	// (deniedSem); its default of 4,000 would stall a larger window.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(o.AckTimeout),
		jetstream.WithPublishAsyncMaxPending(2*o.MaxPending))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats destination %q: jetstream: %w", o.Name, err)
	}
	d := &Destination{
		name:      o.Name,
		subject:   tmpl,
		tokens:    address.TokenRule{Span: o.SubjectTokens, Wildcards: "*>"},
		headers:   destination.NewHeaderFilter(o.AllowHeaders, o.OnDroppedHeader),
		secrets:   append(append([]string(nil), o.Secrets...), o.Token),
		stream:    o.Stream,
		nc:        nc,
		js:        js,
		sem:       make(chan struct{}, o.MaxPending),
		deniedSem: make(chan struct{}, o.MaxPending),
		log:       log,
		servers:   servers,
		denied:    denied,
		closed:    make(chan struct{}),
		events:    events,
	}
	if err := d.ensureStream(ctx, o); err != nil {
		nc.Close()
		return nil, err
	}
	log.Info("nats connected", "server", nc.ConnectedUrlRedacted(), "subject", tmpl.String())
	return d, nil
}

func (o *Options) setDefaults() {
	if o.Name == "" {
		o.Name = "nats"
	}
	if len(o.Servers) == 0 {
		o.Servers = []string{nats.DefaultURL}
	}
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.AckTimeout <= 0 {
		o.AckTimeout = DefaultAckTimeout
	}
	if o.ReconnectWait <= 0 {
		o.ReconnectWait = DefaultReconnectWait
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectWait
	}
}

// subjectTemplate parses the subject template, or the template of
// subjectFrom; {{ topic }} when neither is set.
func subjectTemplate(o Options) (*address.Template, error) {
	src := o.Subject
	switch {
	case o.Subject != "" && o.SubjectFrom != "":
		return nil, fmt.Errorf("nats destination %q: set subject or subjectFrom, not both", o.Name)
	case o.SubjectFrom != "":
		var ok bool
		if src, ok = subjectFromTemplates[o.SubjectFrom]; !ok {
			return nil, fmt.Errorf("nats destination %q: subjectFrom %q: want topic, key or aggregate_type", o.Name, o.SubjectFrom)
		}
	case o.Subject == "":
		src = "{{ topic }}"
	}
	tmpl, err := address.ParseTemplate(src)
	if err != nil {
		return nil, fmt.Errorf("nats destination %q: subject: %w", o.Name, err)
	}
	return tmpl, nil
}

// connOptions are the connection's options: reconnect forever, no buffer
// while disconnected, credentials, TLS, and handlers that log and note
// the server's refusals of a subject (denied).
func connOptions(o Options, log *slog.Logger, denied *denials) []nats.Option {
	opts := []nats.Option{
		nats.Name("queuebox/" + o.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(o.ReconnectWait),
		nats.Timeout(o.ConnectTimeout),
		// Messages published while disconnected are not buffered: their
		// acks are lost on reconnect anyway, so fail them at once.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "error", err)
			} else {
				log.Info("nats disconnected")
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "server", nc.ConnectedUrlRedacted())
		}),
		nats.ClosedHandler(func(*nats.Conn) { log.Debug("nats connection closed") }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if subj, ok := publishDenied(err); ok {
				denied.add(subj)
			}
			log.Warn("nats asynchronous error", "error", err)
		}),
	}
	if o.Token != "" {
		opts = append(opts, nats.Token(o.Token))
	}
	if o.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.TLS != nil {
		opts = append(opts, nats.Secure(o.TLS))
	}
	return opts
}

// Check reports whether the connection is up and the JetStream account
// answers.
func (d *Destination) Check(ctx context.Context) error {
	select {
	case <-d.closed:
		return ErrClosed
	default:
	}
	if st := d.nc.Status(); st != nats.CONNECTED {
		return outbox.Unavailable(fmt.Errorf("nats destination %q: not connected to %s (%s)", d.name, d.servers, st))
	}
	if _, err := d.js.AccountInfo(ctx); err != nil {
		return outbox.Unavailable(fmt.Errorf("nats destination %q: JetStream account: %w", d.name, err))
	}
	return nil
}

// Close drains and closes the connection. It is idempotent.
func (d *Destination) Close() error {
	d.closeOnce.Do(func() {
		close(d.closed)
		if err := d.nc.Drain(); err != nil {
			d.nc.Close()
		}
		// Futures still outstanding (refused publishes waiting for their
		// ack to time out) resolve now, and their waiters end.
		d.js.CleanupPublisher()
	})
	return nil
}

// redactURLs returns the server list with passwords and tokens hidden.
func redactURLs(servers []string) string {
	out := make([]string, len(servers))
	for i, s := range servers {
		u, err := url.Parse(s)
		if err != nil || u.User == nil {
			if strings.Contains(s, "@") {
				out[i] = "<redacted>@" + s[strings.LastIndex(s, "@")+1:]
			} else {
				out[i] = s
			}
			continue
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		} else {
			u.User = url.User("xxxxx") // a bare token
		}
		out[i] = u.String()
	}
	return strings.Join(out, ",")
}
