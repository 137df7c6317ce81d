package amqp_test

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/destination/amqp"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
)

// frameConn passes the broker's frames to the client whole, so that a test
// can insert frames of its own between them (connection.blocked and
// connection.unblocked, as a broker sends them when a memory or disk alarm
// goes off and clears) and hold the broker's back (no confirm arrives).
// A resource alarm on the shared broker would block every test's
// publishers: the notification is the broker's part this test plays
// itself, the rest is the real broker.
type frameConn struct {
	net.Conn
	mu   sync.Mutex
	cond *sync.Cond
	out  [][]byte // frames for the client, in order
	held [][]byte // the broker's frames held back
	hold bool
	cur  []byte // what is left of the frame being read
	err  error  // the broker side's end, once out is drained
}

func newFrameConn(c net.Conn) *frameConn {
	f := &frameConn{Conn: c}
	f.cond = sync.NewCond(&f.mu)
	go f.pump()
	return f
}

// pump reads the broker's frames: a 7-byte header (type, channel, size),
// the payload and the frame-end octet.
func (f *frameConn) pump() {
	for {
		hdr := make([]byte, 7)
		_, err := io.ReadFull(f.Conn, hdr)
		var frame []byte
		if err == nil {
			frame = make([]byte, 7+int(binary.BigEndian.Uint32(hdr[3:7]))+1)
			copy(frame, hdr)
			_, err = io.ReadFull(f.Conn, frame[7:])
		}
		f.mu.Lock()
		switch {
		case err != nil:
			f.err = err
		case f.hold:
			f.held = append(f.held, frame)
		default:
			f.out = append(f.out, frame)
		}
		f.cond.Broadcast()
		f.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func (f *frameConn) Read(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.cur) == 0 {
		switch {
		case len(f.out) > 0:
			f.cur, f.out = f.out[0], f.out[1:]
		case f.err != nil:
			return 0, f.err
		default:
			f.cond.Wait()
		}
	}
	n := copy(p, f.cur)
	f.cur = f.cur[n:]
	return n, nil
}

func (f *frameConn) Close() error {
	err := f.Conn.Close()
	f.mu.Lock()
	if f.err == nil {
		f.err = net.ErrClosed
	}
	f.cond.Broadcast()
	f.mu.Unlock()
	return err
}

// inject hands frame to the client after the frames already passed on.
func (f *frameConn) inject(frame []byte) {
	f.mu.Lock()
	f.out = append(f.out, frame)
	f.cond.Broadcast()
	f.mu.Unlock()
}

// holdBroker holds the broker's frames back (true), or passes them on,
// the held ones first (false).
func (f *frameConn) holdBroker(on bool) {
	f.mu.Lock()
	f.hold = on
	if !on {
		f.out, f.held = append(f.out, f.held...), nil
	}
	f.cond.Broadcast()
	f.mu.Unlock()
}

// connectionMethod is a method frame on channel 0 of class connection (10).
func connectionMethod(method uint16, args []byte) []byte {
	payload := binary.BigEndian.AppendUint16(nil, 10)
	payload = binary.BigEndian.AppendUint16(payload, method)
	payload = append(payload, args...)
	frame := []byte{1, 0, 0} // method frame, channel 0
	frame = binary.BigEndian.AppendUint32(frame, uint32(len(payload)))
	return append(append(frame, payload...), 0xCE)
}

func connectionBlocked(reason string) []byte {
	return connectionMethod(60, append([]byte{byte(len(reason))}, reason...))
}

func connectionUnblocked() []byte { return connectionMethod(61, nil) }

// alarmed is a destination whose connections are frameConns, at a fresh
// exchange with one queue bound to every key, after one message went
// through (the connection is open).
type alarmed struct {
	d     *amqp.Destination
	adm   *testenv.AMQPAdmin
	queue string
	ctx   context.Context

	mu    sync.Mutex
	conns []*frameConn
}

func newAlarmed(t *testing.T, name string, confirmTimeout time.Duration) *alarmed {
	t.Helper()
	url := testenv.AMQPURL(t)
	a := &alarmed{adm: testenv.NewAMQPAdmin(t, url), ctx: testenv.Context(t, 30*time.Second)}
	ex := testenv.AMQPName(t, name)
	a.adm.Exchange(ex, "topic")
	a.queue = a.adm.Queue("q", ex, "#")
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		fc := newFrameConn(c)
		a.mu.Lock()
		a.conns = append(a.conns, fc)
		a.mu.Unlock()
		return fc, nil
	}
	d, err := amqp.NewWithDial(a.ctx, amqp.Options{Name: name, URL: url, Exchange: ex, ConfirmTimeout: confirmTimeout}, nil, dial)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	a.d = d
	if err := d.Publish(a.ctx, []outbox.Message{msg(0, "t", "")}); err != nil {
		t.Fatalf("first Publish: %v", err)
	}
	a.adm.Consume(a.queue, 1, 5*time.Second)
	return a
}

func (a *alarmed) conn() *frameConn {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.conns[len(a.conns)-1]
}

func (a *alarmed) dials() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.conns)
}

// noRoom checks that every message of a Publish failed with the resource
// alarm's NoRoom.
func noRoom(t *testing.T, err error, n int) {
	t.Helper()
	for i := range n {
		e := destination.ErrorAt(err, i)
		if limit, ok := outbox.NoRoomLimit(e); !ok || limit != amqp.LimitResourceAlarm || outbox.IsUnavailable(e) || outbox.IsPermanent(e) {
			t.Errorf("message %d: %v (limit %q); want NoRoom %q", i, e, limit, amqp.LimitResourceAlarm)
		}
	}
}

// TestBlockedConnectionIsNoRoom: while the broker blocks the connection
// (connection.blocked), a Publish fails at once with NoRoom and writes
// nothing (a write would wait for the alarm to clear), and Check says so;
// after connection.unblocked, publishing goes on, on the same connection.
func TestBlockedConnectionIsNoRoom(t *testing.T) {
	t.Parallel()
	const confirmTimeout = 20 * time.Second
	a := newAlarmed(t, "blocked", confirmTimeout)
	a.conn().inject(connectionBlocked("low on memory"))
	testenv.Eventually(t, 5*time.Second, func() bool { return amqp.Blocked(a.d) }, "connection.blocked was not taken")

	start := time.Now()
	batch := []outbox.Message{msg(1, "t", ""), msg(2, "t", "")}
	noRoom(t, a.d.Publish(a.ctx, batch), len(batch))
	if took := time.Since(start); took > confirmTimeout/4 {
		t.Errorf("Publish on a blocked connection took %v; want it to fail at once", took)
	}
	if limit, ok := outbox.NoRoomLimit(a.d.Check(a.ctx)); !ok || limit != amqp.LimitResourceAlarm {
		t.Errorf("Check on a blocked connection: limit %q, %v; want NoRoom", limit, ok)
	}
	if n := a.adm.Count(a.queue); n != 0 {
		t.Errorf("the queue holds %d messages published while blocked; want none written", n)
	}

	a.conn().inject(connectionUnblocked())
	testenv.Eventually(t, 5*time.Second, func() bool { return !amqp.Blocked(a.d) }, "connection.unblocked was not taken")
	if err := a.d.Publish(a.ctx, batch); err != nil {
		t.Fatalf("Publish after connection.unblocked: %v", err)
	}
	if got := a.adm.Consume(a.queue, 2, 5*time.Second); len(got) != 2 {
		t.Errorf("consumed %d messages after the alarm cleared; want 2", len(got))
	}
	if n := a.dials(); n != 1 {
		t.Errorf("dialled %d times; want the connection kept through the alarm", n)
	}
}

// TestBlockedMidBatchIsNoRoom: the broker blocks the connection while a
// batch waits for its confirms (which it then holds): the batch fails with
// NoRoom as soon as the notification comes, not after ConfirmTimeout as
// an unavailable destination; once unblocked, the next batch goes out.
func TestBlockedMidBatchIsNoRoom(t *testing.T) {
	t.Parallel()
	const confirmTimeout = 20 * time.Second
	a := newAlarmed(t, "midbatch", confirmTimeout)
	c := a.conn()
	c.holdBroker(true) // the publishes go out; no confirm comes back
	batch := []outbox.Message{msg(1, "t", ""), msg(2, "t", ""), msg(3, "t", "")}
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- a.d.Publish(a.ctx, batch) }()
	// Once the messages reached the broker, it says it blocks publishers.
	testenv.Eventually(t, 5*time.Second, func() bool { return a.adm.Count(a.queue) == len(batch) }, "the batch did not reach the broker")
	c.inject(connectionBlocked("low on disk"))
	var err error
	select {
	case err = <-done:
	case <-time.After(confirmTimeout / 2):
		t.Fatal("Publish still waits for confirms after connection.blocked")
	}
	t.Logf("Publish returned after %v", time.Since(start))
	noRoom(t, err, len(batch))

	c.holdBroker(false)
	c.inject(connectionUnblocked())
	testenv.Eventually(t, 5*time.Second, func() bool { return !amqp.Blocked(a.d) }, "connection.unblocked was not taken")
	if err := a.d.Publish(a.ctx, []outbox.Message{msg(4, "t", "")}); err != nil {
		t.Fatalf("Publish after connection.unblocked: %v", err)
	}
}
