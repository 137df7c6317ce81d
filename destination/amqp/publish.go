package amqp

import (
	"context"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/outbox"
)

// publish is one pass of Publish: msgs on one channel, and each message's
// outcome. Messages AMQP cannot carry fail permanently before anything is
// written; when nothing could be written (no connection, a resource alarm,
// ctx ended), every other message gets that failure.
func (d *Destination) publish(ctx context.Context, msgs []outbox.Message) []error {
	p := d.newPass(ctx, msgs)
	if err := ctx.Err(); err != nil {
		// Nothing was sent: every message fails, retryably.
		return p.failTodo(fmt.Errorf("amqp: not published: %w", err))
	}
	s, err := d.acquire(ctx)
	if err != nil {
		return p.failTodo(err)
	}
	for i := range msgs {
		if p.todo[i] {
			if p.errs[i] = checkProperties(&p.pubs[i], s.frameMax, d.secrets); p.errs[i] != nil {
				p.todo[i] = false
			}
		}
	}
	s, err = d.ensureExchanges(ctx, s, p.addrs, p.todo, p.errs)
	if err != nil {
		return p.failTodo(err)
	}
	p.s = s
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
	p.wctx = wctx
	var writing atomic.Bool
	writing.Store(true)
	cut := time.AfterFunc(d.opts.ConfirmTimeout, func() {
		if writing.Load() && s.raw != nil {
			_ = s.raw.Close()
		}
	})
	defer cut.Stop()

	// raised tells whether the broker's resource alarm went off during
	// the batch: the failures it causes are back-pressure, not an outage.
	p.raised = s.alarm.raised.Load()
	p.write()
	writing.Store(false)
	// reusable: the channel can serve the next batch (no confirm or
	// return of this one can still arrive on it, and it is open).
	awaited := p.await()
	reusable := p.pubErr == nil && awaited
	// timedOut: ConfirmTimeout passed, not ctx: the broker is blocking
	// publishers or withholding confirms.
	p.timedOut = wctx.Err() != nil && ctx.Err() == nil
	s.barrier()
	if !p.outcomes() {
		reusable = false
	}
	if reusable && !s.isDead() {
		d.release(s)
	} else {
		d.forget(s)
		s.discard()
	}
	return p.errs
}

// pass is the state of one publish of a batch on one channel.
type pass struct {
	d         *Destination
	ctx, wctx context.Context
	s         *session
	msgs      []outbox.Message
	addrs     []addr
	pubs      []amqp.Publishing
	todo      []bool // still to publish: the checks passed
	errs      []error
	confirms  []*amqp.DeferredConfirmation
	pubErr    error // the first write that failed
	written   int
	raised    uint64 // the alarm's count when the batch began
	timedOut  bool

	closeErr     error // the channel's close reason, once looked up
	closeChecked bool
}

// newPass renders each message's exchange, routing key and properties;
// a message whose address cannot be rendered fails here.
func (d *Destination) newPass(ctx context.Context, msgs []outbox.Message) *pass {
	p := &pass{d: d, ctx: ctx, msgs: msgs, errs: make([]error, len(msgs)), addrs: make([]addr, len(msgs)),
		pubs: make([]amqp.Publishing, len(msgs)), todo: make([]bool, len(msgs))}
	for i := range msgs {
		ex, err := d.exchange.RenderEscaped(&msgs[i], d.addressValue)
		if err == nil {
			p.addrs[i].exchange = ex
			p.addrs[i].key, err = d.rkey.RenderEscaped(&msgs[i], d.addressValue)
		}
		if err == nil {
			err = checkAddress(p.addrs[i], d.secrets)
		}
		if err == nil {
			p.pubs[i], err = d.properties(&msgs[i])
		}
		if err == nil && d.adjust != nil {
			d.adjust(&msgs[i], &p.pubs[i])
		}
		p.errs[i] = err
		p.todo[i] = err == nil
	}
	return p
}

// failTodo fails every message still to publish with err.
func (p *pass) failTodo(err error) []error {
	for i := range p.errs {
		if p.todo[i] {
			p.errs[i] = err
		}
	}
	return p.errs
}

// write publishes the messages to publish, until a write fails or the
// broker blocks the connection.
func (p *pass) write() {
	p.confirms = make([]*amqp.DeferredConfirmation, len(p.msgs))
	for i := range p.msgs {
		if !p.todo[i] {
			continue
		}
		if p.pubErr == nil && p.s.alarm.active() {
			// Blocked since the batch began: whatever is written now
			// waits for the alarm to clear.
			p.pubErr = p.d.blockedError(p.s.alarm)
		}
		if p.pubErr != nil {
			p.errs[i] = p.pubErr
			continue
		}
		dc, err := p.s.ch.PublishWithDeferredConfirmWithContext(p.wctx, p.addrs[i].exchange, p.addrs[i].key, true, false, p.pubs[i])
		if err != nil {
			p.pubErr = err
			p.errs[i] = err
			continue
		}
		p.confirms[i] = dc
		p.written++
	}
}

// await waits for the confirms of the messages written; false when some
// may still arrive on the channel (the bound passed, or the broker holds
// them under an alarm): the channel must not serve another batch.
func (p *pass) await() bool {
	alarmed := p.s.alarm.changed()
	for _, dc := range p.confirms {
		if dc == nil {
			continue
		}
	wait:
		for {
			select {
			case <-dc.Done():
				break wait
			case <-p.wctx.Done():
				return false
			case <-alarmed:
				alarmed = p.s.alarm.changed()
				if p.s.alarm.active() {
					// The broker holds the rest until the alarm clears.
					return false
				}
			}
		}
	}
	return true
}

// blockedSince reports whether the broker blocked the connection during
// the batch.
func (p *pass) blockedSince() bool {
	return p.s.alarm.active() || p.s.alarm.raised.Load() != p.raised
}

// closeReason is the channel's close error, if it closed; a failed
// batch waits for it once (closeGrace), not once per message.
func (p *pass) closeReason() error {
	if !p.closeChecked {
		p.closeChecked = true
		p.d.waitClose(p.s.dead)
		if r := p.s.reason(); r != nil {
			p.closeErr = p.d.channelClosed(r)
		} else if p.s.isDead() {
			p.closeErr = outbox.Unavailable(fmt.Errorf("amqp %s: channel closed", p.d.redacted))
		}
	}
	return p.closeErr
}

// unconfirmed is the failure of a message whose confirm did not come.
func (p *pass) unconfirmed() error {
	switch {
	case p.blockedSince():
		return p.d.blockedError(p.s.alarm)
	case p.timedOut:
		return outbox.Unavailable(fmt.Errorf("amqp %s: no publisher confirm within %s: the broker may be withholding confirms (a quorum queue without its majority) or blocking its publishers' connections",
			p.d.redacted, p.d.opts.ConfirmTimeout))
	}
	return fmt.Errorf("amqp: no publisher confirm before the context ended: %w", p.ctx.Err())
}

// outcomes sets each message's outcome from its confirm, its return and
// the channel's fate; false when the channel closed under the batch.
func (p *pass) outcomes() (reusable bool) {
	reusable = true
	p.s.mu.Lock()
	returned := maps.Clone(p.s.returned)
	p.s.mu.Unlock()
	for i, dc := range p.confirms {
		if dc == nil {
			p.notWritten(i)
			continue
		}
		select {
		case <-dc.Done():
		default:
			p.errs[i] = p.unconfirmed()
			continue
		}
		if r, ok := returned[p.msgs[i].ID]; ok {
			p.errs[i] = fmt.Errorf("amqp: unroutable: exchange %q routing key %q has no bound queue (%d %s)",
				r.Exchange, r.RoutingKey, r.ReplyCode, r.ReplyText)
			continue
		}
		if dc.Acked() {
			continue
		}
		if r := p.closeReason(); r != nil {
			reusable = false
			p.errs[i] = r
			if p.written == 1 {
				p.errs[i] = refusedAlone(r)
			}
			continue
		}
		// A nack leaves the channel open and usable. RabbitMQ nacks a
		// message that a queue at its length limit rejects (x-overflow:
		// reject-publish), or that a queue failed to take: either way it
		// has no room for it now.
		p.errs[i] = outbox.NoRoom(LimitQueueFull, fmt.Errorf("amqp: message nacked by the broker (exchange %q routing key %q): a queue it routes to is full and rejects publishes (x-max-length with x-overflow: reject-publish), or failed to take it",
			p.addrs[i].exchange, p.addrs[i].key))
	}
	return reusable
}

// notWritten sets the outcome of message i, which was not written because
// an earlier write failed: the reason that write failed.
func (p *pass) notWritten(i int) {
	if p.errs[i] == nil || !p.todo[i] || p.pubErr == nil || outbox.IsNoRoom(p.errs[i]) {
		return
	}
	switch {
	case p.timedOut || p.blockedSince():
		p.errs[i] = p.unconfirmed()
	case p.ctx.Err() != nil:
		// Shutdown ended the publish: not a broker failure.
		p.errs[i] = fmt.Errorf("amqp: not published before the context ended: %w", p.ctx.Err())
	default:
		if r := p.closeReason(); r != nil {
			p.errs[i] = r
		} else {
			p.errs[i] = classifyConnErr(fmt.Errorf("amqp %s: publish: %w", p.d.redacted, p.errs[i]))
		}
	}
}

// blockedError is the failure of a message not published, or not
// confirmed, because the broker blocks the connection.
func (d *Destination) blockedError(a *alarm) error {
	reason := a.why()
	if reason == "" {
		reason = "no reason given"
	}
	return outbox.NoRoom(LimitResourceAlarm, fmt.Errorf("amqp %s: the broker blocks publishers (%s): a memory or disk alarm is in effect; free memory or disk on the broker, or raise vm_memory_high_watermark or lower disk_free_limit",
		d.redacted, reason))
}

// result is Publish's return for the outcomes errs: nil, one error when
// every message failed with the destination unavailable, or a
// *destination.BatchError.
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

// addressValue checks a value rendered into the exchange or the routing
// key: one word, unless routingKeyTokens: allow. The topic is exempt: it
// is a dotted name by contract, and its route's pattern matched its
// tokens.
func (d *Destination) addressValue(_ int, name, v string) (string, error) {
	if name == "topic" {
		return v, nil
	}
	if err := d.tokens.Check(v); err != nil {
		if !d.tokens.Span {
			return "", fmt.Errorf("%w (set routingKeyTokens: allow to let values span routing-key words)", err)
		}
		return "", err
	}
	return v, nil
}

type addr struct{ exchange, key string }

// Publish publishes msgs on one confirm-mode channel and waits for all their
// confirms. It returns nil, a *destination.BatchError, or an
// outbox.Unavailable error when the broker could not be reached.
//
// A message AMQP cannot carry (an exchange name, routing key or header
// name over 255 bytes, properties larger than a frame) fails permanently
// before anything is written: written, it would fail in the client's
// encoder or be refused with a connection error, and take the connection,
// every other message on it, with it.
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
//
// While the broker blocks publishers (connection.blocked: a memory or disk
// alarm), messages fail with outbox.NoRoom without being written.
func (d *Destination) Publish(ctx context.Context, msgs []outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	errs := d.publish(ctx, msgs)
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
	subErrs := d.publish(ctx, sub)
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
