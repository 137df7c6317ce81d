package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/destination/amqp"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
)

// counted is a destination at a fresh topic exchange with one queue bound
// to every key, whose dials are counted: a test can tell that the
// connection it started with is still the one in use.
type counted struct {
	d     *amqp.Destination
	adm   *testenv.AMQPAdmin
	ex    string
	queue string

	mu    sync.Mutex
	dials int
}

func newCounted(t *testing.T, name string, o amqp.Options) *counted {
	t.Helper()
	url := testenv.AMQPURL(t)
	c := &counted{adm: testenv.NewAMQPAdmin(t, url), ex: testenv.AMQPName(t, name)}
	c.adm.Exchange(c.ex, "topic")
	c.queue = c.adm.Queue("q", c.ex, "#")
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c.mu.Lock()
		c.dials++
		c.mu.Unlock()
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	o.Name, o.URL = name, url
	if o.Exchange == "" {
		o.Exchange = c.ex
	}
	d, err := amqp.NewWithDial(testenv.Context(t, 10*time.Second), o, nil, dial)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	c.d = d
	return c
}

func (c *counted) dialled() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dials
}

// delivered checks that the messages of want reached the queue, and that
// nothing else did. A message published again after its channel closed
// (Publish narrowing a refusal down) may be there twice: consumers
// deduplicate on message_id.
func (c *counted) delivered(t *testing.T, want []outbox.Message) {
	t.Helper()
	wanted := map[string]bool{}
	for _, m := range want {
		wanted[m.ID] = true
	}
	got := map[string]bool{}
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < len(wanted) && time.Now().Before(deadline) {
		for _, dl := range c.adm.Consume(c.queue, 1, time.Until(deadline)) {
			got[dl.MessageId] = true
		}
	}
	for _, dl := range c.adm.Consume(c.queue, c.adm.Count(c.queue), time.Second) {
		got[dl.MessageId] = true
	}
	for id := range wanted {
		if !got[id] {
			t.Errorf("message %s was reported published but is not in the queue", id)
		}
	}
	for id := range got {
		if !wanted[id] {
			t.Errorf("message %s is in the queue, but was not reported published", id)
		}
	}
}

// TestWhatAMQPCannotCarryIsPermanent: an exchange name, a routing key or a
// header name over AMQP's 255-byte short string, and row headers too large
// for one frame, fail permanently before anything is written; the other
// messages of the batch are delivered, on the same connection, which
// serves the next batch. Written, the long names failed in amqp091's
// encoder, which closed the connection: the batch failed as "destination
// unavailable", the circuit opened, and every probe carried the same row.
func TestWhatAMQPCannotCarryIsPermanent(t *testing.T) {
	t.Parallel()
	c := newCounted(t, "cannot", amqp.Options{RoutingKey: "{{ key }}", Exchange: "{{ aggregateType }}", RoutingKeyTokens: true})
	ctx := testenv.Context(t, 30*time.Second)
	good := func(i int) outbox.Message {
		m := msg(i, "t", fmt.Sprintf("k%d", i))
		m.AggregateType = c.ex
		return m
	}
	long := strings.Repeat("x", 300)
	batch := []outbox.Message{good(0), good(1), good(2), good(3), good(4), good(5), good(6)}
	batch[1].Key = long                                    // routing key
	batch[3].AggregateType = long                          // exchange name
	batch[4].Headers[long] = "v"                           // header name
	batch[6].Headers["big"] = strings.Repeat("v", 200<<10) // above frame_max
	bad := map[int]string{1: "routing key", 3: "exchange name", 4: "header name", 6: "frame_max"}
	err := c.d.Publish(ctx, batch)
	var want []outbox.Message
	for i := range batch {
		e := destination.ErrorAt(err, i)
		what, isBad := bad[i]
		switch {
		case isBad && (!outbox.IsPermanent(e) || outbox.IsUnavailable(e) || !strings.Contains(e.Error(), what)):
			t.Errorf("message %d (%s): %v; want a permanent failure naming the %s", i, what, e, what)
		case !isBad && e != nil:
			t.Errorf("message %d: %v; want it delivered", i, e)
		case !isBad:
			want = append(want, batch[i])
		}
	}
	c.delivered(t, want)
	next := good(7)
	if err := c.d.Publish(ctx, []outbox.Message{next}); err != nil {
		t.Fatalf("the next Publish: %v", err)
	}
	c.delivered(t, []outbox.Message{next})
	if n := c.dialled(); n != 1 {
		t.Errorf("dialled %d times; want the first connection kept", n)
	}
}

// TestRefusedMessageAloneIsPermanent: a message the broker refuses with
// 406 PRECONDITION_FAILED on basic.publish (above max_message_size, which
// a test cannot lower on a shared broker; here an expiration the broker
// cannot parse, which it refuses the same way) is narrowed down to itself
// and fails permanently; the others of the batch are delivered, and the
// connection stays.
func TestRefusedMessageAloneIsPermanent(t *testing.T) {
	t.Parallel()
	c := newCounted(t, "refused", amqp.Options{})
	refuse := map[string]bool{}
	amqp.SetAdjust(c.d, func(m *outbox.Message, p *amqp091.Publishing) {
		if refuse[m.ID] {
			p.Expiration = "not-a-number"
		}
	})
	ctx := testenv.Context(t, 30*time.Second)
	batch := []outbox.Message{msg(0, "t", ""), msg(1, "t", ""), msg(2, "t", ""), msg(3, "t", ""), msg(4, "t", "")}
	refuse[batch[2].ID] = true
	alone := msg(5, "t", "")
	refuse[alone.ID] = true

	err := c.d.Publish(ctx, batch)
	var want []outbox.Message
	for i, m := range batch {
		e := destination.ErrorAt(err, i)
		switch {
		case refuse[m.ID] && (!outbox.IsPermanent(e) || !strings.Contains(e.Error(), "PRECONDITION_FAILED")):
			t.Errorf("refused message: %v; want permanent, with the broker's 406", e)
		case !refuse[m.ID] && e != nil:
			t.Errorf("message %d: %v; want it delivered", i, e)
		case !refuse[m.ID]:
			want = append(want, m)
		}
	}
	c.delivered(t, want)
	if e := destination.ErrorAt(c.d.Publish(ctx, []outbox.Message{alone}), 0); !outbox.IsPermanent(e) {
		t.Errorf("a refused message alone in its batch: %v; want permanent", e)
	}
	next := msg(6, "t", "")
	if err := c.d.Publish(ctx, []outbox.Message{next}); err != nil {
		t.Fatalf("the next Publish: %v", err)
	}
	c.delivered(t, []outbox.Message{next})
	if n := c.dialled(); n != 1 {
		t.Errorf("dialled %d times; want the first connection kept (a 406 closes a channel only)", n)
	}
}

// TestAccessRefusedAloneStaysRetryable: a message refused with 403
// ACCESS_REFUSED (an internal exchange) is the configuration's problem,
// not the row's: alone in its batch, it is retryable, not permanent.
func TestAccessRefusedAloneStaysRetryable(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	adm := testenv.NewAMQPAdmin(t, url)
	ex := testenv.AMQPName(t, "internal")
	adm.InternalExchange(ex, "topic")
	d := newDest(t, amqp.Options{URL: url, Exchange: ex})
	e := destination.ErrorAt(d.Publish(testenv.Context(t, 20*time.Second), []outbox.Message{msg(0, "t", "")}), 0)
	if e == nil || outbox.IsPermanent(e) || outbox.IsUnavailable(e) || outbox.IsNoRoom(e) || !strings.Contains(e.Error(), "ACCESS_REFUSED") {
		t.Fatalf("publish to an internal exchange: %v; want a plain retryable failure with the broker's 403", e)
	}
}

// TestNackIsNoRoom: a queue at its x-max-length with x-overflow:
// reject-publish makes the broker nack: the destination is up but has no
// room. The channel stays usable.
func TestNackIsNoRoom(t *testing.T) {
	t.Parallel()
	d, adm, q := fullQueueDest(t)
	ctx := testenv.Context(t, 20*time.Second)
	err := d.Publish(ctx, []outbox.Message{msg(0, "t", ""), msg(1, "t", "")})
	if e := destination.ErrorAt(err, 0); e != nil {
		t.Fatalf("first message: %v", e)
	}
	e := destination.ErrorAt(err, 1)
	if limit, ok := outbox.NoRoomLimit(e); !ok || limit != amqp.LimitQueueFull || outbox.IsUnavailable(e) {
		t.Fatalf("nacked message: %v (limit %q); want NoRoom %q", e, limit, amqp.LimitQueueFull)
	}
	adm.Consume(q, 1, 5*time.Second)
	if err := d.Publish(ctx, []outbox.Message{msg(2, "t", "")}); err != nil {
		t.Errorf("Publish once the queue has room: %v", err)
	}
}

// TestBrokerDownIsUnavailableNotPermanent: with the broker out of reach,
// the messages AMQP cannot carry still fail permanently (the check needs
// no connection), and the others are unavailable.
func TestBrokerDownIsUnavailableNotPermanent(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 20*time.Second)
	d, err := amqp.New(ctx, amqp.Options{Name: "down", URL: "amqp://guest:guest@" + testenv.ClosedPort(t) + "/", Exchange: "x", RoutingKey: "{{ key }}", DialTimeout: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	err = d.Publish(ctx, []outbox.Message{msg(0, "t", "k"), msg(1, "t", strings.Repeat("k", 256))})
	var be *destination.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("Publish = %v; want a BatchError", err)
	}
	if !outbox.IsUnavailable(be.Errs[0]) || !outbox.IsPermanent(be.Errs[1]) {
		t.Fatalf("outcomes %v; want unavailable, then permanent", be.Errs)
	}
}
