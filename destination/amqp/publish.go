package amqp

import (
	"context"
	"fmt"
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
	errs := make([]error, len(msgs))
	addrs := make([]addr, len(msgs))
	pubs := make([]amqp.Publishing, len(msgs))
	todo := make([]bool, len(msgs))
	for i := range msgs {
		ex, err := d.exchange.RenderEscaped(&msgs[i], d.addressValue)
		if err == nil {
			addrs[i].exchange = ex
			addrs[i].key, err = d.rkey.RenderEscaped(&msgs[i], d.addressValue)
		}
		if err == nil {
			err = checkAddress(addrs[i], d.secrets)
		}
		if err == nil {
			pubs[i] = d.properties(&msgs[i])
			if d.adjust != nil {
				d.adjust(&msgs[i], &pubs[i])
			}
		}
		errs[i] = err
		todo[i] = err == nil
	}
	failTodo := func(err error) []error {
		for i := range errs {
			if todo[i] {
				errs[i] = err
			}
		}
		return errs
	}
	if err := ctx.Err(); err != nil {
		// Nothing was sent: every message fails, retryably.
		return failTodo(fmt.Errorf("amqp: not published: %w", err))
	}
	s, err := d.acquire(ctx)
	if err != nil {
		return failTodo(err)
	}
	for i := range msgs {
		if todo[i] {
			if errs[i] = checkProperties(&pubs[i], s.frameMax, d.secrets); errs[i] != nil {
				todo[i] = false
			}
		}
	}
	s, err = d.ensureExchanges(ctx, s, addrs, todo, errs)
	if err != nil {
		return failTodo(err)
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

	// raised tells whether the broker's resource alarm went off during
	// the batch: the failures it causes are back-pressure, not an outage.
	raised := s.alarm.raised.Load()
	blockedSince := func() bool { return s.alarm.active() || s.alarm.raised.Load() != raised }

	confirms := make([]*amqp.DeferredConfirmation, len(msgs))
	var pubErr error
	written := 0
	for i := range msgs {
		if !todo[i] {
			continue
		}
		if pubErr == nil && s.alarm.active() {
			// Blocked since the batch began: whatever is written now
			// waits for the alarm to clear.
			pubErr = d.blockedError(s.alarm)
		}
		if pubErr != nil {
			errs[i] = pubErr
			continue
		}
		dc, err := s.ch.PublishWithDeferredConfirmWithContext(wctx, addrs[i].exchange, addrs[i].key, true, false, pubs[i])
		if err != nil {
			pubErr = err
			errs[i] = err
			continue
		}
		confirms[i] = dc
		written++
	}
	writing.Store(false)

	// reusable: the channel can serve the next batch (no confirm or
	// return of this one can still arrive on it, and it is open).
	reusable := pubErr == nil
	alarmed := s.alarm.changed()
wait:
	for _, dc := range confirms {
		if dc == nil {
			continue
		}
		for {
			select {
			case <-dc.Done():
				continue wait
			case <-wctx.Done():
				// Confirms still due would arrive on a channel we hand
				// to the next batch: drop the channel instead.
				reusable = false
				break wait
			case <-alarmed:
				alarmed = s.alarm.changed()
				if s.alarm.active() {
					// The broker holds the rest until the alarm clears.
					reusable = false
					break wait
				}
			}
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
	// unconfirmed is the failure of a message whose confirm did not come.
	unconfirmed := func() error {
		switch {
		case blockedSince():
			return d.blockedError(s.alarm)
		case timedOut:
			return outbox.Unavailable(fmt.Errorf("amqp %s: no publisher confirm within %s: the broker may be withholding confirms (a quorum queue without its majority) or blocking its publishers' connections",
				d.redacted, d.opts.ConfirmTimeout))
		}
		return fmt.Errorf("amqp: no publisher confirm before the context ended: %w", ctx.Err())
	}
	for i, dc := range confirms {
		if dc == nil {
			if errs[i] != nil && todo[i] && pubErr != nil && !outbox.IsNoRoom(errs[i]) {
				switch {
				case timedOut || blockedSince():
					errs[i] = unconfirmed()
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
			errs[i] = unconfirmed()
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
			if written == 1 {
				errs[i] = refusedAlone(r)
			}
		} else {
			// A nack leaves the channel open and usable. RabbitMQ nacks
			// a message that a queue at its length limit rejects
			// (x-overflow: reject-publish), or that a queue failed to
			// take: either way it has no room for it now.
			errs[i] = outbox.NoRoom(LimitQueueFull, fmt.Errorf("amqp: message nacked by the broker (exchange %q routing key %q): a queue it routes to is full and rejects publishes (x-max-length with x-overflow: reject-publish), or failed to take it",
				addrs[i].exchange, addrs[i].key))
		}
	}
	if reusable && !s.isDead() {
		d.release(s)
	} else {
		d.forget(s)
		s.discard()
	}
	return errs
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
