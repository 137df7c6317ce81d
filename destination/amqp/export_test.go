package amqp

import (
	"context"
	"log/slog"
	"net"
)

// NewWithDial is New with the TCP dial replaced, so that a test can cut the
// connection under the destination.
func NewWithDial(ctx context.Context, opts Options, log *slog.Logger, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*Destination, error) {
	return newDestination(ctx, opts, log, dial)
}

// SetWaitClose replaces the wait for a channel's close reason, so that a
// test can count the waits.
func SetWaitClose(d *Destination, f func(dead <-chan struct{})) { d.waitClose = f }
