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
// redialled on the next Publish. See doc.go for the full behaviour.
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
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/router"
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
}

// Destination publishes outbox messages to RabbitMQ.
type Destination struct {
	opts     Options
	log      *slog.Logger
	redacted string
	exchange *router.Template
	rkey     *router.Template

	// dial is replaced by tests to reach the TCP connection.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)

	// waitClose waits up to closeGrace for a channel's close reason;
	// replaced by tests to count the waits.
	waitClose func(dead <-chan struct{})

	mu     sync.Mutex
	conn   *amqp.Connection
	raw    net.Conn // conn's socket: closing it ends a write the broker blocks
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
	ex, err := router.ParseTemplate(opts.Exchange)
	if err != nil {
		return nil, fmt.Errorf("amqp destination %q: exchange: %w", opts.Name, err)
	}
	rk, err := router.ParseTemplate(opts.RoutingKey)
	if err != nil {
		return nil, fmt.Errorf("amqp destination %q: routingKey: %w", opts.Name, err)
	}
	red := redactURI(uri)
	d := &Destination{
		opts:     opts,
		log:      log.With("destination", opts.Name, "type", "amqp", "url", red),
		redacted: red,
		exchange: ex,
		rkey:     rk,
		known:    map[string]bool{},
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

// connLocked returns a live connection, dialling when there is none. d.mu
// is held.
func (d *Destination) connLocked(ctx context.Context) (*amqp.Connection, uint64, error) {
	if d.closed {
		return nil, 0, ErrClosed
	}
	if d.conn != nil && !d.conn.IsClosed() {
		return d.conn, d.gen, nil
	}
	timeout := d.opts.DialTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return nil, 0, ctx.Err()
	}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName("queuebox/" + d.opts.Name)
	var raw net.Conn
	cfg := amqp.Config{
		TLSClientConfig: d.opts.TLS,
		Properties:      props,
		Heartbeat:       10 * time.Second,
		Locale:          "en_US",
		Dial: func(network, addr string) (net.Conn, error) {
			dctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			c, err := d.dial(dctx, network, addr)
			if err != nil {
				return nil, err
			}
			// Bounds the TLS and AMQP handshakes; amqp091 clears it once
			// the connection is open.
			if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
				_ = c.Close()
				return nil, err
			}
			raw = c
			return c, nil
		},
	}
	conn, err := amqp.DialConfig(d.opts.URL, cfg)
	if err != nil {
		return nil, 0, outbox.Unavailable(fmt.Errorf("amqp %s: connect: %w", d.redacted, scrubURL(err)))
	}
	if d.conn != nil {
		d.log.Info("amqp connection re-established")
	}
	d.conn, d.raw = conn, raw
	d.gen++
	d.known = map[string]bool{}
	for _, s := range d.idle {
		s.discard()
	}
	d.idle = nil
	closes := conn.NotifyClose(make(chan *amqp.Error, 1))
	gen := d.gen
	go func() {
		if e, ok := <-closes; ok && e != nil {
			d.log.Warn("amqp connection closed; will reconnect on next publish", "generation", gen, "error", e)
		}
	}()
	return conn, d.gen, nil
}

func scrubURL(err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return uerr.Err
	}
	return err
}

// session is one confirm-mode channel, owned by one Publish at a time.
type session struct {
	ch      *amqp.Channel
	raw     net.Conn // the connection's socket
	gen     uint64
	returns chan amqp.Return
	closes  chan *amqp.Error
	sync    chan chan struct{}
	dead    chan struct{} // closed when the channel is closed
	exited  chan struct{} // closed when watch returns

	mu       sync.Mutex
	returned map[string]amqp.Return // message_id -> return, for the current batch
	closeErr *amqp.Error
}

func (d *Destination) acquire(ctx context.Context) (*session, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	conn, gen, err := d.connLocked(ctx)
	if err != nil {
		return nil, err
	}
	for len(d.idle) > 0 {
		s := d.idle[len(d.idle)-1]
		d.idle = d.idle[:len(d.idle)-1]
		if s.gen == gen && !s.isDead() {
			return s, nil
		}
		s.discard()
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, classifyConnErr(fmt.Errorf("amqp %s: open channel: %w", d.redacted, err))
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, classifyConnErr(fmt.Errorf("amqp %s: confirm mode: %w", d.redacted, err))
	}
	s := &session{
		ch:       ch,
		raw:      d.raw,
		gen:      gen,
		returns:  ch.NotifyReturn(make(chan amqp.Return)), // unbuffered: see watch
		closes:   ch.NotifyClose(make(chan *amqp.Error, 1)),
		sync:     make(chan chan struct{}),
		dead:     make(chan struct{}),
		exited:   make(chan struct{}),
		returned: map[string]amqp.Return{},
	}
	go s.watch()
	return s, nil
}

func (d *Destination) release(s *session) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || s.gen != d.gen || s.isDead() || len(d.idle) >= d.opts.MaxIdleChannels {
		s.discard()
		return
	}
	d.idle = append(d.idle, s)
}

// watch records returns and the channel's close reason. The returns channel
// is unbuffered: amqp091 delivers a basic.return to it before it processes
// the basic.ack of the same message, so once a confirm is observed, the
// return (if any) has already been received here; sync (handled in order
// after that receive) makes it visible to Publish.
func (s *session) watch() {
	defer close(s.exited)
	returns, closes := s.returns, s.closes
	for returns != nil || closes != nil {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			s.mu.Lock()
			s.returned[r.MessageId] = r
			s.mu.Unlock()
		case e, ok := <-closes:
			s.mu.Lock()
			if ok && s.closeErr == nil {
				s.closeErr = e
			}
			s.mu.Unlock()
			if closes != nil {
				close(s.dead)
			}
			closes = nil
		case reply := <-s.sync:
			close(reply)
		}
	}
}

// barrier waits until watch has handled every return received so far.
func (s *session) barrier() {
	reply := make(chan struct{})
	select {
	case s.sync <- reply:
		<-reply
	case <-s.exited:
	}
}

func (s *session) isDead() bool {
	select {
	case <-s.dead:
		return true
	default:
		return false
	}
}

func (s *session) reason() *amqp.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeErr
}

func (s *session) discard() {
	// Close waits for the broker's close-ok; watch keeps draining meanwhile.
	go func() { _ = s.ch.Close() }()
}

// Properties returns the AMQP message Publish sends for m.
func Properties(m *outbox.Message) amqp.Publishing {
	h := amqp.Table{
		HeaderTopic:   m.Topic,
		HeaderAttempt: int64(m.Attempt),
	}
	if m.Key != "" {
		h[HeaderMessageKey] = m.Key
	}
	// Row headers are added unless named like one of the relay's own (any
	// case), as on the NATS and HTTP destinations: x-attempt is 0 on the
	// first delivery (contract §4), and no row can say otherwise. The
	// identity is the message_id property, which no header can reach.
	for k, v := range m.Headers {
		if strings.EqualFold(k, HeaderTopic) || strings.EqualFold(k, HeaderAttempt) || strings.EqualFold(k, HeaderMessageKey) {
			continue
		}
		h[k] = v
	}
	return amqp.Publishing{
		MessageId:    m.ID,
		DeliveryMode: amqp.Persistent,
		ContentType:  ContentType,
		Timestamp:    m.CreatedAt,
		Headers:      h,
		Body:         m.Payload,
	}
}

type addr struct{ exchange, key string }

// Publish publishes msgs on one confirm-mode channel and waits for all their
// confirms. It returns nil, a *destination.BatchError, or an
// outbox.Unavailable error when the broker could not be reached.
//
// A message the broker refuses with a channel error (an internal exchange,
// a missing write permission, a message over max_message_size) closes the
// channel, and with it every message of the batch not yet confirmed fails
// with the same error. Those messages are published again, on fresh
// channels, in halves (isolate) until the refused ones fail alone: the
// others of the batch are delivered, and spend no attempt for a row that
// is not theirs. A message the broker had routed but not confirmed when
// the channel closed is published twice; consumers deduplicate on its
// message-id, as after any lost confirm.
func (d *Destination) Publish(ctx context.Context, msgs []outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	errs, err := d.publish(ctx, msgs)
	if err != nil {
		return err
	}
	var closed []int
	for i, e := range errs {
		if isChannelClosed(e) {
			closed = append(closed, i)
		}
	}
	if len(closed) > 1 {
		passes := maxIsolatePasses
		d.isolate(ctx, msgs, errs, closed, &passes)
	}
	return d.result(errs)
}

// maxIsolatePasses bounds the publishes of one batch's isolate: a batch of
// n messages with one refused needs about 2·log2(n) (20 at n = 1,000); one
// where every message is refused would need 2n − 1. Past the bound the
// messages left keep the channel's error.
const maxIsolatePasses = 64

// isolate publishes msgs[idx...] again, the messages whose channel closed
// under them, and narrows them down: the ones that still fail with a
// closed channel are published again apart from the ones confirmed, and
// when none was confirmed, in halves, until each refused message failed
// alone. errs gets each message's last outcome.
func (d *Destination) isolate(ctx context.Context, msgs []outbox.Message, errs []error, idx []int, passes *int) {
	if len(idx) == 0 || ctx.Err() != nil || *passes <= 0 {
		return
	}
	*passes--
	sub := make([]outbox.Message, len(idx))
	for j, i := range idx {
		sub[j] = msgs[i]
	}
	subErrs, err := d.publish(ctx, sub)
	if err != nil {
		// The broker is out of reach, or ctx ended: not a refusal.
		for _, i := range idx {
			errs[i] = err
		}
		return
	}
	var again []int
	for j, i := range idx {
		errs[i] = subErrs[j]
		if isChannelClosed(subErrs[j]) {
			again = append(again, i)
		}
	}
	switch {
	case len(again) == 0 || len(idx) == 1:
		// Delivered, or the refused message found.
	case len(again) < len(idx):
		d.isolate(ctx, msgs, errs, again, passes)
	default:
		half := len(again) / 2
		d.isolate(ctx, msgs, errs, again[:half], passes)
		d.isolate(ctx, msgs, errs, again[half:], passes)
	}
}

// isChannelClosed reports whether err is a channel closed by the broker
// (a soft error: the connection stays usable) under a message.
func isChannelClosed(err error) bool {
	var (
		aerr *amqp.Error
		xerr exchangeFailure
	)
	return err != nil && !outbox.IsUnavailable(err) && !errors.As(err, &xerr) && errors.As(err, &aerr) && isChannelLevel(aerr)
}

// publish is one pass of Publish: msgs on one channel, each message's
// outcome in the slice, or an error for them all when nothing could be
// published (the connection, or ctx ended first).
func (d *Destination) publish(ctx context.Context, msgs []outbox.Message) ([]error, error) {
	if err := ctx.Err(); err != nil {
		// Nothing was sent: every message fails, retryably.
		return nil, err
	}
	errs := make([]error, len(msgs))
	addrs := make([]addr, len(msgs))
	todo := make([]bool, len(msgs))
	for i := range msgs {
		ex, err := d.exchange.Render(&msgs[i])
		if err == nil {
			addrs[i].exchange = ex
			addrs[i].key, err = d.rkey.Render(&msgs[i])
		}
		errs[i] = err
		todo[i] = err == nil
	}
	s, err := d.acquire(ctx)
	if err != nil {
		return nil, err
	}
	s, err = d.ensureExchanges(ctx, s, addrs, todo, errs)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	clear(s.returned)
	s.mu.Unlock()

	// The publish and its confirms are bounded by ConfirmTimeout, and a
	// write the broker blocks (amqp091 checks ctx only before each write)
	// is ended by closing the connection's socket when that bound passes.
	// Only the bound cuts the socket, never ctx: the connection is every
	// worker's, and a batch whose context ended (shutdown, a lost lease)
	// must not fail the others' publishes with it.
	wctx, cancel := context.WithTimeout(ctx, d.opts.ConfirmTimeout)
	defer cancel()
	var writing atomic.Bool
	writing.Store(true)
	cut := time.AfterFunc(d.opts.ConfirmTimeout, func() {
		if writing.Load() && s.raw != nil {
			_ = s.raw.Close()
		}
	})
	defer cut.Stop()

	confirms := make([]*amqp.DeferredConfirmation, len(msgs))
	var pubErr error
	for i := range msgs {
		if !todo[i] {
			continue
		}
		if pubErr != nil {
			errs[i] = pubErr
			continue
		}
		dc, err := s.ch.PublishWithDeferredConfirmWithContext(wctx, addrs[i].exchange, addrs[i].key, true, false, Properties(&msgs[i]))
		if err != nil {
			pubErr = err
			errs[i] = err
			continue
		}
		confirms[i] = dc
	}
	writing.Store(false)

	// reusable: the channel can serve the next batch (no confirm or
	// return of this one can still arrive on it, and it is open).
	reusable := pubErr == nil
wait:
	for _, dc := range confirms {
		if dc == nil {
			continue
		}
		select {
		case <-dc.Done():
		case <-wctx.Done():
			// Confirms still due would arrive on a channel we hand to the
			// next batch: drop the channel instead.
			reusable = false
			break wait
		}
	}
	// timedOut: ConfirmTimeout passed, not ctx: the broker is blocking
	// publishers or withholding confirms.
	timedOut := wctx.Err() != nil && ctx.Err() == nil
	s.barrier()
	s.mu.Lock()
	returned := make(map[string]amqp.Return, len(s.returned))
	for k, v := range s.returned {
		returned[k] = v
	}
	s.mu.Unlock()

	// closeReason is the channel's close error, if it closed; a failed
	// batch waits for it once (closeGrace), not once per message.
	var closeErr error
	checked := false
	closeReason := func() error {
		if !checked {
			checked = true
			d.waitClose(s.dead)
			if r := s.reason(); r != nil {
				closeErr = d.channelClosed(r)
			} else if s.isDead() {
				closeErr = outbox.Unavailable(fmt.Errorf("amqp %s: channel closed", d.redacted))
			}
		}
		return closeErr
	}
	blocked := func() error {
		return outbox.Unavailable(fmt.Errorf("amqp %s: no publisher confirm within %s: the broker may be blocking publishers (a memory or disk alarm) or withholding confirms (a queue without its majority)",
			d.redacted, d.opts.ConfirmTimeout))
	}
	for i, dc := range confirms {
		if dc == nil {
			if errs[i] != nil && todo[i] && pubErr != nil {
				switch {
				case timedOut:
					errs[i] = blocked()
				case ctx.Err() != nil:
					// Shutdown ended the publish: not a broker failure.
					errs[i] = fmt.Errorf("amqp: not published before the context ended: %w", ctx.Err())
				default:
					if r := closeReason(); r != nil {
						errs[i] = r
					} else {
						errs[i] = classifyConnErr(fmt.Errorf("amqp %s: publish: %w", d.redacted, errs[i]))
					}
				}
			}
			continue
		}
		select {
		case <-dc.Done():
		default:
			if timedOut {
				errs[i] = blocked()
			} else {
				errs[i] = fmt.Errorf("amqp: no publisher confirm before the context ended: %w", ctx.Err())
			}
			continue
		}
		if r, ok := returned[msgs[i].ID]; ok {
			errs[i] = fmt.Errorf("amqp: unroutable: exchange %q routing key %q has no bound queue (%d %s)",
				r.Exchange, r.RoutingKey, r.ReplyCode, r.ReplyText)
			continue
		}
		if dc.Acked() {
			continue
		}
		if r := closeReason(); r != nil {
			reusable = false
			errs[i] = r
		} else {
			// A nack leaves the channel open and usable.
			errs[i] = fmt.Errorf("amqp: message nacked by the broker (exchange %q routing key %q)", addrs[i].exchange, addrs[i].key)
		}
	}
	if reusable && !s.isDead() {
		d.release(s)
	} else {
		d.forget(s)
		s.discard()
	}
	return errs, nil
}

func (d *Destination) result(errs []error) error {
	var n, unavailable int
	var first error
	for _, err := range errs {
		if err != nil {
			if first == nil {
				first = err
			}
			n++
			if outbox.IsUnavailable(err) {
				unavailable++
			}
		}
	}
	if n == 0 {
		return nil
	}
	if unavailable == len(errs) {
		return first
	}
	return &destination.BatchError{Errs: errs}
}

// forget drops what this connection knows about exchanges after a channel
// died mid-batch (an exchange may have been deleted).
func (d *Destination) forget(s *session) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.gen == d.gen {
		d.known = map[string]bool{}
	}
}

// ensureExchanges declares (DeclareExchange) or passively checks every
// exchange of the batch not yet known on this connection. A failure closes
// the channel: the messages to that exchange get the error, a new channel is
// opened, and the others go on. It returns the session to publish on.
func (d *Destination) ensureExchanges(ctx context.Context, s *session, addrs []addr, todo []bool, errs []error) (*session, error) {
	var pending []string
	seen := map[string]bool{}
	d.mu.Lock()
	for i, a := range addrs {
		if todo[i] && a.exchange != "" && !d.known[a.exchange] && !seen[a.exchange] {
			seen[a.exchange] = true
			pending = append(pending, a.exchange)
		}
	}
	d.mu.Unlock()
	for _, ex := range pending {
		var err error
		if d.opts.DeclareExchange && !strings.HasPrefix(ex, "amq.") {
			err = s.ch.ExchangeDeclare(ex, d.opts.ExchangeType, true, false, false, false, nil)
		} else {
			err = s.ch.ExchangeDeclarePassive(ex, d.opts.ExchangeType, true, false, false, false, nil)
		}
		if err == nil {
			d.mu.Lock()
			if s.gen == d.gen {
				d.known[ex] = true
			}
			d.mu.Unlock()
			continue
		}
		var aerr *amqp.Error
		if !errors.As(err, &aerr) || !isChannelLevel(aerr) {
			s.discard()
			return nil, classifyConnErr(fmt.Errorf("amqp %s: exchange %q: %w", d.redacted, ex, err))
		}
		eerr := d.exchangeError(ex, aerr)
		for i, a := range addrs {
			if todo[i] && a.exchange == ex {
				todo[i] = false
				errs[i] = eerr
			}
		}
		s.discard()
		if s, err = d.acquire(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (d *Destination) exchangeError(ex string, e *amqp.Error) error {
	var err error
	switch e.Code {
	case amqp.NotFound:
		err = fmt.Errorf("amqp: exchange %q does not exist (declare it, or set declareExchange: true): %w", ex, e)
	case amqp.PreconditionFailed:
		err = fmt.Errorf("amqp: exchange %q exists with other settings than type %q, durable: %w", ex, d.opts.ExchangeType, e)
	case amqp.AccessRefused:
		err = fmt.Errorf("amqp: access to exchange %q refused: %w", ex, e)
	default:
		err = fmt.Errorf("amqp: exchange %q: %w", ex, e)
	}
	return exchangeFailure{err}
}

// exchangeFailure marks the error of a message whose exchange failed its
// check before anything was published: it failed on its own, so Publish
// does not publish it again to narrow a refusal down (isolate).
type exchangeFailure struct{ error }

func (e exchangeFailure) Unwrap() error { return e.error }

// channelClosed classifies the reason a channel was closed mid-batch.
func (d *Destination) channelClosed(e *amqp.Error) error {
	if !isChannelLevel(e) {
		return outbox.Unavailable(fmt.Errorf("amqp %s: connection lost before the publisher confirm: %w", d.redacted, e))
	}
	if e.Code == amqp.NotFound {
		return fmt.Errorf("amqp: channel closed by the broker, exchange missing? (declare it, or set declareExchange: true): %w", e)
	}
	return fmt.Errorf("amqp: channel closed by the broker before the publisher confirm: %w", e)
}

// isChannelLevel reports whether e closes one channel only (the connection
// stays usable): the soft errors of AMQP 0.9.1.
func isChannelLevel(e *amqp.Error) bool {
	switch e.Code {
	case amqp.ContentTooLarge, amqp.NoRoute, amqp.NoConsumers, amqp.AccessRefused,
		amqp.NotFound, amqp.ResourceLocked, amqp.PreconditionFailed:
		return e.Server
	}
	return false
}

// classifyConnErr marks connection-level failures Unavailable.
func classifyConnErr(err error) error {
	var aerr *amqp.Error
	if errors.As(err, &aerr) && isChannelLevel(aerr) {
		return err
	}
	// The connection is gone (amqp.ErrClosed, a hard error, a network
	// error): the destination as a whole is unavailable.
	return outbox.Unavailable(err)
}

// Check connects (or reuses the connection) and opens a channel; with a
// literal exchange and DeclareExchange off it also checks that the exchange
// exists.
func (d *Destination) Check(ctx context.Context) error {
	d.mu.Lock()
	conn, _, err := d.connLocked(ctx)
	d.mu.Unlock()
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return classifyConnErr(fmt.Errorf("amqp %s: open channel: %w", d.redacted, err))
	}
	defer func() { _ = ch.Close() }()
	if d.exchange.Static() && !d.opts.DeclareExchange {
		ex, _ := d.exchange.Render(&outbox.Message{})
		if ex != "" {
			if err := ch.ExchangeDeclarePassive(ex, d.opts.ExchangeType, true, false, false, false, nil); err != nil {
				var aerr *amqp.Error
				if errors.As(err, &aerr) {
					return d.exchangeError(ex, aerr)
				}
				return classifyConnErr(err)
			}
		}
	}
	return nil
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
