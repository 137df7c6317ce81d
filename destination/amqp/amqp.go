// Package amqp is the RabbitMQ (AMQP 0.9.1) destination of queuebox, built
// on github.com/rabbitmq/amqp091-go.
//
// Every row becomes one persistent message, published with mandatory=true on
// a channel in publisher-confirm mode. A batch is published whole and its
// confirms are awaited together, so many confirms are outstanding on a
// channel at once instead of one round trip per message. A message counts as
// sent only when the broker confirmed it (basic.ack) and did not return it
// (basic.return: no queue bound for its routing key).
//
// amqp091 does not reconnect by itself. The destination keeps one connection
// and a small pool of confirm-mode channels; a channel closed by a broker
// error is dropped and replaced on the next Publish, and a dead connection is
// redialled on the next Publish. docs/destinations/amqp.md has the full
// behaviour and the classification of every failure.
package amqp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/address"
	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/destination/cloudevents"
	"github.com/queuebox/queuebox/outbox"
)

// Header names set on every message (AMQP header names are lower case by
// convention).
const (
	HeaderTopic      = "x-topic"
	HeaderAttempt    = "x-attempt"
	HeaderMessageKey = "x-message-key"
)

// Defaults applied by New.
const (
	DefaultRoutingKey   = "{{ topic }}"
	DefaultExchangeType = "topic"
	DefaultDialTimeout  = 5 * time.Second
	DefaultMaxIdle      = 4
	// DefaultConfirmTimeout bounds one batch's publish and confirms.
	DefaultConfirmTimeout = 30 * time.Second
	// closeGrace is how long a failed batch waits for the channel's close
	// reason (a channel-level error arrives just after the failure it
	// explains), once per batch.
	closeGrace  = 250 * time.Millisecond
	ContentType = "application/json"
)

// Options configure an AMQP destination. They map one to one from the
// `type: amqp` destination of the configuration file: url, exchange (or
// exchangeFrom: aggregate_type, which is the template "{{ aggregateType }}"),
// exchangeType, routingKey, declareExchange and tls.
type Options struct {
	// Name is the destination name, used in logs.
	Name string
	// URL is amqp:// or amqps://user:pass@host:port/vhost. A secret: only
	// its redacted form is ever logged.
	URL string
	// Exchange is a template rendered per message: a literal ("billing"),
	// "{{ aggregateType }}", ... The empty string is the default exchange,
	// which routes by queue name.
	Exchange string
	// RoutingKey is a template; empty means DefaultRoutingKey.
	RoutingKey string
	// ExchangeType is used when DeclareExchange is set; empty means
	// DefaultExchangeType.
	ExchangeType string
	// DeclareExchange declares each exchange (durable, ExchangeType) once
	// per connection before publishing to it. Off: the exchange must exist;
	// each one is checked (passively) once per connection.
	DeclareExchange bool
	// TLS configures amqps:// connections; nil uses the system roots.
	TLS *tls.Config
	// DialTimeout bounds connecting (TCP, TLS and AMQP handshake).
	DialTimeout time.Duration
	// MaxIdleChannels is how many confirm-mode channels are kept open
	// between batches; concurrent Publish calls each use their own channel.
	MaxIdleChannels int
	// ConfirmTimeout bounds one Publish, from its first write to its last
	// confirm, independently of ctx: a broker that blocks its publishers
	// (a memory or disk alarm blocks the TCP connection, and amqp091
	// checks ctx only before a write) or withholds confirms (a quorum
	// queue without its majority) keeps heartbeating, so the connection
	// is never declared dead. When it passes, the messages not confirmed
	// fail as unavailable and the connection is closed, so that a write
	// blocked on it returns. 0: DefaultConfirmTimeout.
	ConfirmTimeout time.Duration
	// RoutingKeyTokens lets a value rendered into the exchange or the
	// routing key span several words (config routingKeyTokens: allow).
	// Off, each value of those templates other than {{ topic }} must be
	// one word: a value with a ".", "*", "#" or whitespace makes the row
	// dead with the reason.
	RoutingKeyTokens bool
	// AllowHeaders are row headers sent although the policy drops them
	// (an x- header, CC, BCC), in any case. The headers queuebox sets are
	// never replaced by a row.
	AllowHeaders []string
	// OnDroppedHeader is called with the name of each row header not
	// sent (nil: not reported).
	OnDroppedHeader func(name string)
	// Secrets are removed from the text of errors that quote a bounded
	// part of a row value (a routing key too long to show whole).
	Secrets []string
	// CloudEvents, when set, sends every row as a CloudEvent in the AMQP
	// binding's binary (cloudEvents:* headers) or structured mode.
	CloudEvents *cloudevents.Options
}

// Destination publishes outbox messages to RabbitMQ.
type Destination struct {
	opts     Options
	log      *slog.Logger
	redacted string
	exchange *address.Template
	rkey     *address.Template
	tokens   address.TokenRule
	filter   *destination.HeaderFilter
	secrets  []string
	events   *cloudevents.Encoder // nil: rows are not sent as CloudEvents

	// dial is replaced by tests to reach the TCP connection.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)

	// waitClose waits up to closeGrace for a channel's close reason;
	// replaced by tests to count the waits.
	waitClose func(dead <-chan struct{})

	// adjust, set by tests only, changes a message's properties before
	// the checks and the publish (a property the broker refuses).
	adjust func(m *outbox.Message, p *amqp.Publishing)

	mu     sync.Mutex
	conn   *amqp.Connection
	raw    net.Conn // conn's socket: closing it ends a write the broker blocks
	alarm  *alarm   // conn's resource alarm
	gen    uint64
	idle   []*session
	known  map[string]bool // exchanges declared or checked on conn
	closed bool
}

var (
	_ destination.Destination = (*Destination)(nil)
	_ destination.Checker     = (*Destination)(nil)
)

// ErrClosed is returned by Publish and Check after Close.
var ErrClosed = errors.New("amqp destination is closed")

// New validates opts and connects. A broker that cannot be reached is not an
// error here when ctx allows no retry: the connection is made again by the
// next Publish. Only invalid options fail New.
func New(ctx context.Context, opts Options, log *slog.Logger) (*Destination, error) {
	return newDestination(ctx, opts, log, func(ctx context.Context, network, addr string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	})
}

func newDestination(ctx context.Context, opts Options, log *slog.Logger, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*Destination, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	uri, err := amqp.ParseURI(opts.URL)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error repeats the URL, password included
		}
		return nil, fmt.Errorf("amqp destination %q: url: not an AMQP URI: %v", opts.Name, err)
	}
	if opts.RoutingKey == "" {
		opts.RoutingKey = DefaultRoutingKey
	}
	if opts.ExchangeType == "" {
		opts.ExchangeType = DefaultExchangeType
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.MaxIdleChannels <= 0 {
		opts.MaxIdleChannels = DefaultMaxIdle
	}
	if opts.ConfirmTimeout <= 0 {
		opts.ConfirmTimeout = DefaultConfirmTimeout
	}
	ex, err := address.ParseTemplate(opts.Exchange)
	if err != nil {
		return nil, fmt.Errorf("amqp destination %q: exchange: %w", opts.Name, err)
	}
	rk, err := address.ParseTemplate(opts.RoutingKey)
	if err != nil {
		return nil, fmt.Errorf("amqp destination %q: routingKey: %w", opts.Name, err)
	}
	var events *cloudevents.Encoder
	if opts.CloudEvents != nil {
		if events, err = cloudevents.New(*opts.CloudEvents); err != nil {
			return nil, fmt.Errorf("amqp destination %q: %w", opts.Name, err)
		}
	}
	red := redactURI(uri)
	d := &Destination{
		opts:     opts,
		log:      log.With("destination", opts.Name, "type", "amqp", "url", red),
		redacted: red,
		exchange: ex,
		rkey:     rk,
		tokens:   address.TokenRule{Span: opts.RoutingKeyTokens, Wildcards: "*#"},
		filter:   destination.NewHeaderFilter(opts.AllowHeaders, opts.OnDroppedHeader),
		secrets:  append(append([]string(nil), opts.Secrets...), uri.Password),
		known:    map[string]bool{},
		events:   events,
		dial:     dial,
		waitClose: func(dead <-chan struct{}) {
			select {
			case <-dead:
			case <-time.After(closeGrace):
			}
		},
	}
	if err := d.connectNow(ctx); err != nil {
		d.log.Warn("amqp broker not reachable yet; will connect on first publish", "error", err)
	}
	return d, nil
}

func (d *Destination) connectNow(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, _, err := d.connLocked(ctx)
	return err
}

func redactURI(u amqp.URI) string {
	u.Password = ""
	s := u.String()
	if u.Username != "" {
		// URI.String writes user:@host; show a mask instead.
		s = strings.Replace(s, "://"+url.User(u.Username).String()+":@", "://"+url.User(u.Username).String()+":xxxxx@", 1)
	}
	return s
}

// Close closes the connection. It is idempotent; Publish after Close fails
// with ErrClosed.
func (d *Destination) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	d.idle = nil
	if d.conn != nil && !d.conn.IsClosed() {
		err := d.conn.Close()
		if err != nil && !errors.Is(err, amqp.ErrClosed) {
			return err
		}
	}
	return nil
}

// String describes the destination without secrets.
func (d *Destination) String() string {
	return "amqp " + d.opts.Name + " (" + d.redacted + ") exchange " + strconv.Quote(d.exchange.String())
}
