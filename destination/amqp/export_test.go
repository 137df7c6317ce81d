package amqp

import (
	"context"
	"log/slog"
	"net"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/outbox"
)

// NewWithDial is New with the TCP dial replaced, so that a test can cut the
// connection under the destination.
func NewWithDial(ctx context.Context, opts Options, log *slog.Logger, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*Destination, error) {
	return newDestination(ctx, opts, log, dial)
}

// SetWaitClose replaces the wait for a channel's close reason, so that a
// test can count the waits.
func SetWaitClose(d *Destination, f func(dead <-chan struct{})) { d.waitClose = f }

// SetAdjust changes each message's properties before it is checked and
// published, so that a test can have the broker refuse one.
func SetAdjust(d *Destination, f func(m *outbox.Message, p *amqp.Publishing)) { d.adjust = f }

// Blocked reports whether the destination's connection is blocked by the
// broker (connection.blocked received, connection.unblocked not yet).
func Blocked(d *Destination) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.alarm != nil && d.alarm.active()
}

// PropertiesOf returns the message d publishes for m, under its row-header
// policy.
func PropertiesOf(d *Destination, m *outbox.Message) amqp.Publishing {
	p, err := d.properties(m)
	if err != nil {
		panic(err)
	}
	return p
}

// Address renders the exchange and routing key of m as d does.
func Address(d *Destination, m *outbox.Message) (exchange, key string, err error) {
	if exchange, err = d.exchange.RenderEscaped(m, d.addressValue); err != nil {
		return "", "", err
	}
	key, err = d.rkey.RenderEscaped(m, d.addressValue)
	return exchange, key, err
}
