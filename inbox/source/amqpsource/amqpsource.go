// Package amqpsource feeds the inbox from a RabbitMQ queue: each delivery
// is stored, then acknowledged; one that can never be stored is rejected
// without requeue (to the queue's dead-letter exchange, if it has one).
package amqpsource

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/inbox/intake"
	"github.com/queuebox/queuebox/inbox/source"
)

// Options say what to consume.
type Options struct {
	URL      string
	Queue    string
	Prefetch int // unacknowledged deliveries at once; default 64
	Headers  intake.HeaderPolicy
}

// Source is a RabbitMQ queue consumer. It reconnects when the connection
// drops; deliveries not yet acknowledged are redelivered by the broker.
type Source struct {
	sink *source.Sink
	o    Options
}

// New checks the options and connects once, so that a wrong URL or a
// missing queue fails the start.
func New(ctx context.Context, sink *source.Sink, o Options) (*Source, error) {
	if o.Prefetch <= 0 {
		o.Prefetch = 64
	}
	s := &Source{sink: sink, o: o}
	conn, ch, err := s.open()
	if err != nil {
		return nil, err
	}
	_ = ch.Close()
	_ = conn.Close()
	return s, nil
}

func (s *Source) open() (*amqp.Connection, *amqp.Channel, error) {
	conn, err := amqp.DialConfig(s.o.URL, amqp.Config{Properties: amqp.Table{"connection_name": "queuebox inbox"}})
	if err != nil {
		return nil, nil, fmt.Errorf("amqp: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Qos(s.o.Prefetch, 0, false)
	}
	if err == nil {
		_, err = ch.QueueDeclarePassive(s.o.Queue, true, false, false, false, nil)
	}
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("amqp: queue %s: %w", s.o.Queue, err)
	}
	return conn, ch, nil
}

// Run consumes until ctx ends, reconnecting after a lost connection.
func (s *Source) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := s.consume(ctx); err != nil && ctx.Err() == nil {
			s.sink.Log().Warn("inbox: RabbitMQ source disconnected; reconnecting", "source", s.sink.Rules.Source, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}

func (s *Source) consume(ctx context.Context) error {
	conn, ch, err := s.open()
	if err != nil {
		return err
	}
	defer conn.Close()
	deliveries, err := ch.ConsumeWithContext(ctx, s.o.Queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("delivery channel closed")
			}
			s.put(ctx, d)
		}
	}
}

func (s *Source) put(ctx context.Context, d amqp.Delivery) {
	h := http.Header{}
	for k, v := range d.Headers {
		if str, ok := v.(string); ok {
			h.Set(k, str)
		} else if v != nil {
			h.Set(k, fmt.Sprint(v))
		}
	}
	get := func(name string) string {
		if v := h.Get(name); v != "" {
			return v
		}
		for k, v := range h { // AMQP header names keep their case
			if strings.EqualFold(k, name) && len(v) > 0 {
				return v[0]
			}
		}
		return ""
	}
	id := strings.TrimSpace(d.MessageId)
	if id == "" {
		id = source.MessageID(get)
	}
	in := intake.Input{Topic: d.RoutingKey, Header: get, Body: &intake.Body{Raw: d.Body}, MessageID: id}
	err := s.sink.Put(ctx, in, s.o.Headers.Filter(h))
	switch {
	case err == nil:
		_ = d.Ack(false)
	case errors.Is(err, source.ErrRefused):
		_ = d.Reject(false)
	}
}
