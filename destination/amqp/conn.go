package amqp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/outbox"
)

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
	d.alarm = newAlarm()
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
	// amqp091 delivers connection.blocked and connection.unblocked from
	// the connection's reader, which waits until they are taken; the
	// channel is closed with the connection.
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 1))
	go func(a *alarm) {
		for b := range blocks {
			a.set(b.Active, b.Reason)
			if b.Active {
				d.log.Warn("amqp broker blocks publishers (resource alarm); publishes wait until it clears", "generation", gen, "reason", b.Reason)
			} else {
				d.log.Info("amqp broker unblocked publishers", "generation", gen)
			}
		}
	}(d.alarm)
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
	ch       *amqp.Channel
	raw      net.Conn // the connection's socket
	gen      uint64
	alarm    *alarm // the connection's
	frameMax int    // the connection's negotiated frame_max
	returns  chan amqp.Return
	closes   chan *amqp.Error
	sync     chan chan struct{}
	dead     chan struct{} // closed when the channel is closed
	exited   chan struct{} // closed when watch returns

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
	if d.alarm.active() {
		// A blocked connection may not even answer channel.open: fail
		// at once, and publish again once the broker says unblocked.
		return nil, d.blockedError(d.alarm)
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
	frameMax := conn.Config.FrameSize
	if frameMax <= 0 {
		frameMax = defaultFrameMax
	}
	s := &session{
		ch:       ch,
		raw:      d.raw,
		gen:      gen,
		alarm:    d.alarm,
		frameMax: frameMax,
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

// Check connects (or reuses the connection) and opens a channel; with a
// literal exchange and DeclareExchange off it also checks that the exchange
// exists. While the broker blocks publishers it reports that (NoRoom)
// without opening a channel.
func (d *Destination) Check(ctx context.Context) error {
	d.mu.Lock()
	conn, _, err := d.connLocked(ctx)
	al := d.alarm
	d.mu.Unlock()
	if err != nil {
		return err
	}
	if al.active() {
		return d.blockedError(al)
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
