package bench

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The RabbitMQ cases (amqp-keyed, amqp-unkeyed): the bare loop and the relay
// publish to a fresh topic exchange with publisher confirms, mandatory, with
// message_id = row id; the receiver consumes a queue bound to it with "#"
// and counts distinct message ids. They run when RabbitMQ answers at
// Options.AMQPURL; when the cases were not asked for by name and it does
// not, they are skipped with a note.

// DefaultAMQPURL is the local RabbitMQ of the development machine.
const DefaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"

// amqpWorld is the bench's connection to RabbitMQ.
type amqpWorld struct {
	url  string
	conn *amqp.Connection
}

func dialAMQP(url string) (*amqpWorld, error) {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second), Properties: amqp.Table{"connection_name": "queuebox-bench"}})
	if err != nil {
		return nil, fmt.Errorf("bench: connect RabbitMQ %s: %w", redactURL(url), err)
	}
	return &amqpWorld{url: url, conn: conn}, nil
}

func (a *amqpWorld) close() {
	if a != nil && a.conn != nil {
		_ = a.conn.Close()
	}
}

// amqpSink is one run's exchange and the consumer counting what reaches it.
type amqpSink struct {
	exchange string
	ch       *amqp.Channel
}

// sink declares exchange (topic, auto-deleted with its queue) and a queue
// bound to it with "#", and records every delivery's message id in r.
func (a *amqpWorld) sink(ctx context.Context, exchange string, r *receipts) (*amqpSink, error) {
	ch, err := a.conn.Channel()
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*amqpSink, error) {
		_ = ch.Close()
		return nil, fmt.Errorf("bench: RabbitMQ sink: %w", err)
	}
	if err := ch.ExchangeDeclare(exchange, "topic", false, true, false, false, nil); err != nil {
		return fail(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		return fail(err)
	}
	if err := ch.QueueBind(q.Name, "#", exchange, false, nil); err != nil {
		return fail(err)
	}
	if err := ch.Qos(1000, 0, false); err != nil {
		return fail(err)
	}
	deliveries, err := ch.ConsumeWithContext(ctx, q.Name, "", true, true, false, false, nil)
	if err != nil {
		return fail(err)
	}
	go func() {
		for d := range deliveries {
			r.add(d.MessageId, time.Now())
		}
	}()
	return &amqpSink{exchange: exchange, ch: ch}, nil
}

func (s *amqpSink) close() {
	_ = s.ch.ExchangeDelete(s.exchange, false, false)
	_ = s.ch.Close()
}

// barePublishAMQP publishes every row to exchange on one confirming
// channel, routing key = topic, and waits for every confirm.
func barePublishAMQP(ch *amqp.Channel, exchange string) publishFunc {
	return func(ctx context.Context, rows []bareRow) error {
		confirms := make([]*amqp.DeferredConfirmation, 0, len(rows))
		for i := range rows {
			r := &rows[i]
			h := amqp.Table{"x-topic": r.topic, "x-attempt": int32(0)}
			if r.key != nil && *r.key != "" {
				h["x-message-key"] = *r.key
			}
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, r.topic, true, false, amqp.Publishing{
				MessageId: r.id, ContentType: "application/json", DeliveryMode: amqp.Persistent,
				Headers: h, Body: r.payload,
			})
			if err != nil {
				return err
			}
			confirms = append(confirms, dc)
		}
		for _, dc := range confirms {
			ok, err := dc.WaitContext(ctx)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("RabbitMQ nacked message %d", dc.DeliveryTag)
			}
		}
		return nil
	}
}

// confirmChannel opens a channel in confirm mode.
func (a *amqpWorld) confirmChannel() (*amqp.Channel, error) {
	ch, err := a.conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, err
	}
	return ch, nil
}
