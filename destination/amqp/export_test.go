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
