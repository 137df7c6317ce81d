package testenv

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DefaultAMQPURL is the local RabbitMQ used when QUEUEBOX_TEST_AMQP_URL is
// unset.
const DefaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"

// AMQPURL returns the RabbitMQ URL for tests (QUEUEBOX_TEST_AMQP_URL, or
// the local default) after checking that it answers; when it does not, the
// test skips (or fails with QUEUEBOX_REQUIRE_SERVICES=1).
func AMQPURL(t testing.TB) string {
	t.Helper()
	url := Env("QUEUEBOX_TEST_AMQP_URL", DefaultAMQPURL)
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		Unavailable(t, "RabbitMQ", err)
	}
	_ = conn.Close()
	return url
}

// AMQPName returns an exchange or queue name unique to this test run.
func AMQPName(t testing.TB, prefix string) string {
	return "queuebox-test." + prefix + "." + uniqueSuffix(t)
}

// AMQPAdmin is a connection for setting up and reading back a test's
// exchanges and queues; it is closed when the test ends.
type AMQPAdmin struct {
	t    testing.TB
	conn *amqp.Connection
	ch   *amqp.Channel
}

// NewAMQPAdmin connects to url.
func NewAMQPAdmin(t testing.TB, url string) *AMQPAdmin {
	t.Helper()
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		Unavailable(t, "RabbitMQ", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		t.Fatalf("amqp channel: %v", err)
	}
	a := &AMQPAdmin{t: t, conn: conn, ch: ch}
	t.Cleanup(func() { _ = conn.Close() })
	return a
}

// Exchange declares a durable exchange of kind that is deleted when the test
// ends.
func (a *AMQPAdmin) Exchange(name, kind string) {
	a.t.Helper()
	if err := a.ch.ExchangeDeclare(name, kind, true, false, false, false, nil); err != nil {
		a.t.Fatalf("declare exchange %s: %v", name, err)
	}
	a.DeleteExchangeAtCleanup(name)
}

// InternalExchange declares a durable internal exchange of kind (one no
// client may publish to), deleted when the test ends.
func (a *AMQPAdmin) InternalExchange(name, kind string) {
	a.t.Helper()
	if err := a.ch.ExchangeDeclare(name, kind, true, false, true, false, nil); err != nil {
		a.t.Fatalf("declare internal exchange %s: %v", name, err)
	}
	a.DeleteExchangeAtCleanup(name)
}

// DeleteExchangeAtCleanup deletes the exchange name when the test ends
// (for exchanges the code under test declares).
func (a *AMQPAdmin) DeleteExchangeAtCleanup(name string) {
	a.t.Cleanup(func() { a.cleanup(func(ch *amqp.Channel) error { return ch.ExchangeDelete(name, false, false) }) })
}

// Queue declares a queue bound to exchange with bindingKey, deleted when the
// test ends, and returns its name.
func (a *AMQPAdmin) Queue(prefix, exchange, bindingKey string) string {
	a.t.Helper()
	return a.QueueArgs(prefix, exchange, bindingKey, nil)
}

// QueueArgs is Queue with queue arguments (x-max-length, x-overflow, ...).
func (a *AMQPAdmin) QueueArgs(prefix, exchange, bindingKey string, args amqp.Table) string {
	a.t.Helper()
	name := AMQPName(a.t, prefix)
	if _, err := a.ch.QueueDeclare(name, false, false, false, false, args); err != nil {
		a.t.Fatalf("declare queue %s: %v", name, err)
	}
	a.t.Cleanup(func() {
		a.cleanup(func(ch *amqp.Channel) error { _, err := ch.QueueDelete(name, false, false, false); return err })
	})
	if exchange != "" {
		if err := a.ch.QueueBind(name, bindingKey, exchange, false, nil); err != nil {
			a.t.Fatalf("bind queue %s to %s: %v", name, exchange, err)
		}
	}
	return name
}

// cleanup runs fn on a fresh channel (the admin channel may have been closed
// by an error the test provoked).
func (a *AMQPAdmin) cleanup(fn func(*amqp.Channel) error) {
	if a.conn.IsClosed() {
		return
	}
	ch, err := a.conn.Channel()
	if err != nil {
		return
	}
	defer func() { _ = ch.Close() }()
	_ = fn(ch)
}

// Consume reads from queue until n deliveries arrived or d passed, and
// returns them in arrival order (acknowledged). It polls with basic.get, so
// no message beyond n is taken off the queue.
func (a *AMQPAdmin) Consume(queue string, n int, d time.Duration) []amqp.Delivery {
	a.t.Helper()
	deadline := time.Now().Add(d)
	var out []amqp.Delivery
	for len(out) < n {
		m, ok, err := a.ch.Get(queue, true)
		if err != nil {
			a.t.Fatalf("get from %s: %v", queue, err)
		}
		if ok {
			out = append(out, m)
			continue
		}
		if time.Now().After(deadline) {
			return out
		}
		time.Sleep(5 * time.Millisecond)
	}
	return out
}

// Count returns the number of ready messages in queue.
func (a *AMQPAdmin) Count(queue string) int {
	a.t.Helper()
	q, err := a.ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		a.t.Fatalf("inspect queue %s: %v", queue, err)
	}
	return q.Messages
}
