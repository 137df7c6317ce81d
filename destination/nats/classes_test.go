package nats_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/queuebox/queuebox/destination"
	natsdest "github.com/queuebox/queuebox/destination/nats"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
)

// wantNoRoom checks that e is NoRoom naming limit, and neither permanent
// nor unavailable.
func wantNoRoom(t *testing.T, what string, e error, limit string) {
	t.Helper()
	if got, ok := outbox.NoRoomLimit(e); !ok || got != limit || outbox.IsPermanent(e) || outbox.IsUnavailable(e) {
		t.Errorf("%s: %v (limit %q); want NoRoom %q", what, e, got, limit)
	}
}

// TestStreamLimitsAreNoRoom: a stream at one of its limits with discard:
// new refuses further messages (API error 10077): the destination is up
// but has no room, and the error names the limit. The other messages of
// the batch (another subject, under the per-subject limit) are stored,
// and once the stream has room again, publishing goes on. Before, such a
// message was the row's failure: rows died within seconds of a stream
// filling up.
func TestStreamLimitsAreNoRoom(t *testing.T) {
	t.Parallel()
	url := testenv.NATSURL(t)
	for _, c := range []struct {
		limit string
		cfg   jetstream.StreamConfig
	}{
		{natsdest.LimitStreamMaxMsgs, jetstream.StreamConfig{MaxMsgs: 2}},
		{natsdest.LimitStreamMaxBytes, jetstream.StreamConfig{MaxBytes: 1200}},
		{natsdest.LimitStreamMaxMsgsPerSubject, jetstream.StreamConfig{MaxMsgsPerSubject: 2, DiscardNewPerSubject: true}},
	} {
		t.Run(c.limit, func(t *testing.T) {
			t.Parallel()
			prefix := testenv.UniqueName("qbt")
			cfg := c.cfg
			cfg.Subjects, cfg.Storage, cfg.Discard = []string{prefix + ".>"}, jetstream.MemoryStorage, jetstream.DiscardNew
			_, s := testenv.NATSStreamConfig(t, url, cfg)
			d := newDest(t, natsdest.Options{Servers: []string{url}, Subject: prefix + ".{{ topic }}"})
			ctx := testenv.Context(t, 20*time.Second)

			var batch []outbox.Message
			for range 6 {
				m := msg("full")
				m.Payload = bytes.Repeat([]byte("p"), 300)
				batch = append(batch, m)
			}
			other := msg("other") // another subject: only the per-subject limit spares it
			batch = append(batch, other)
			err := d.Publish(ctx, batch)
			stored := 0
			for i := range batch[:6] {
				e := destination.ErrorAt(err, i)
				if e == nil {
					stored++
					continue
				}
				wantNoRoom(t, fmt.Sprintf("message %d", i), e, c.limit)
			}
			if stored == 0 || stored == 6 {
				t.Fatalf("%d of 6 messages stored; want the stream to fill up part way", stored)
			}
			if e := destination.ErrorAt(err, 6); c.limit == natsdest.LimitStreamMaxMsgsPerSubject && e != nil {
				t.Errorf("message to another subject: %v; want it stored", e)
			}

			if err := s.Purge(ctx); err != nil {
				t.Fatal(err)
			}
			if err := d.Publish(ctx, []outbox.Message{msg("full")}); err != nil {
				t.Fatalf("Publish once the stream has room: %v", err)
			}
		})
	}
}

// limitedServer starts an embedded server from a configuration whose
// listen address and store directory it fills in, and returns its URL.
func limitedServer(t *testing.T, conf string) *server.Server {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "nats.conf")
	conf = fmt.Sprintf("listen: \"127.0.0.1:-1\"\n"+conf, dir)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded NATS did not start")
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// fillUntilRefused publishes 3 KB messages one batch at a time until one
// fails, and returns that failure.
func fillUntilRefused(t *testing.T, d *natsdest.Destination, topic string) error {
	t.Helper()
	ctx := testenv.Context(t, 20*time.Second)
	for range 1000 {
		batch := make([]outbox.Message, 8)
		for i := range batch {
			batch[i] = msg(topic)
			batch[i].Payload = bytes.Repeat([]byte("p"), 3000)
		}
		err := d.Publish(ctx, batch)
		for i := range batch {
			if e := destination.ErrorAt(err, i); e != nil {
				return e
			}
		}
	}
	t.Fatal("no publish was refused")
	return nil
}

// TestAccountAndServerLimitsAreNoRoom: the account's JetStream storage
// limit (API error 10002) and the server's (insufficient resources,
// 10023) are back-pressure, named apart.
func TestAccountAndServerLimitsAreNoRoom(t *testing.T) {
	t.Parallel()
	srv := limitedServer(t, `jetstream: {store_dir: %q, max_file_store: 256K}
accounts: {
  A: {jetstream: {max_file: 16K, max_mem: 16K}, users: [{user: a, password: a}]}
  B: {jetstream: enabled, users: [{user: b, password: b}]}
}
`)
	port := testenv.EmbeddedNATSPort(srv)
	for _, c := range []struct{ user, limit string }{{"a", natsdest.LimitAccount}, {"b", natsdest.LimitServer}} {
		url := fmt.Sprintf("nats://%s:%s@127.0.0.1:%d", c.user, c.user, port)
		testenv.NATSStreamConfig(t, url, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
		d := newDest(t, natsdest.Options{Servers: []string{url}, Subject: "s.{{ topic }}"})
		wantNoRoom(t, "user "+c.user, fillUntilRefused(t, d, "x"), c.limit)
		if err := d.Check(testenv.Context(t, 5*time.Second)); err != nil {
			t.Errorf("Check of a full but answering server: %v", err)
		}
	}
}

// TestWhatNATSCannotCarryIsPermanent: a subject too long for the protocol
// line, with an empty token or a wildcard; a header name NATS cannot
// carry; headers over JetStream's 64 KiB; a message over max_payload: each
// fails permanently before the publish; the other messages of the batch
// are stored, and the connection serves the next batch. Published, the
// over-long subject made the server close the connection, under every
// other message, for good.
func TestWhatNATSCannotCarryIsPermanent(t *testing.T) {
	t.Parallel()
	url := testenv.NATSURL(t)
	prefix := testenv.UniqueName("qbt")
	_, s := testenv.NATSStreamConfig(t, url, jetstream.StreamConfig{Subjects: []string{prefix + ".>"}, Storage: jetstream.MemoryStorage})
	d := newDest(t, natsdest.Options{Servers: []string{url}, Subject: prefix + ".{{ topic }}"})
	ctx := testenv.Context(t, 20*time.Second)

	bad := map[int]string{}
	var batch []outbox.Message
	add := func(m outbox.Message, why string) {
		if why != "" {
			bad[len(batch)] = why
		}
		batch = append(batch, m)
	}
	add(msg("ok.a"), "")
	add(msg(strings.Repeat("t", 5000)), "longer than")
	add(msg("ok.b"), "")
	add(msg("a..b"), "empty token")
	add(msg("a.*"), "wildcard")
	badName := msg("ok.c")
	badName.Headers = map[string]string{"bad key": "v"}
	add(badName, "header name")
	bigHeaders := msg("ok.d")
	bigHeaders.Headers = map[string]string{"X-Big": strings.Repeat("h", 70<<10)}
	add(bigHeaders, "headers take")
	big := msg("ok.e")
	big.Payload = bytes.Repeat([]byte("y"), 2<<20) // above the default max_payload (1 MiB)
	add(big, "max_payload")
	add(msg("ok.f"), "")

	err := d.Publish(ctx, batch)
	stored := 0
	for i := range batch {
		e := destination.ErrorAt(err, i)
		why, isBad := bad[i]
		switch {
		case isBad && (!outbox.IsPermanent(e) || outbox.IsUnavailable(e) || !strings.Contains(e.Error(), why)):
			t.Errorf("message %d: %v; want a permanent failure (%s)", i, e, why)
		case !isBad && e != nil:
			t.Errorf("message %d: %v; want it stored", i, e)
		case !isBad:
			stored++
		}
	}
	if err := d.Publish(ctx, []outbox.Message{msg("ok.next")}); err != nil {
		t.Fatalf("the next Publish: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(stored+1) {
		t.Errorf("the stream holds %d messages; want the %d good ones", info.State.Msgs, stored+1)
	}
}

// TestRecordTooLargeIsPermanent: a message above what a file-storage
// stream can store (a server whose max_payload allows it) fails with the
// same API error as a full stream (10077); by its size it is permanent,
// not no room, which would pause the destination for good. The other
// message of the batch is stored.
func TestRecordTooLargeIsPermanent(t *testing.T) {
	t.Parallel()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true, MaxPayload: 40 << 20})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded NATS did not start")
	}
	t.Cleanup(srv.Shutdown)
	url := srv.ClientURL()
	_, s := testenv.NATSStreamConfig(t, url, jetstream.StreamConfig{Name: "BIG", Subjects: []string{"big.>"}, Storage: jetstream.FileStorage})
	d := newDest(t, natsdest.Options{Servers: []string{url}, Subject: "big.{{ topic }}"})
	ctx := testenv.Context(t, 30*time.Second)
	huge := msg("x")
	huge.Payload = make([]byte, 33<<20)
	err = d.Publish(ctx, []outbox.Message{huge, msg("y")})
	if e := destination.ErrorAt(err, 0); !outbox.IsPermanent(e) || outbox.IsNoRoom(e) {
		t.Errorf("a 33 MiB message: %v; want permanent", e)
	}
	if e := destination.ErrorAt(err, 1); e != nil {
		t.Errorf("the small message: %v", e)
	}
	if err := d.Publish(ctx, []outbox.Message{msg("z")}); err != nil {
		t.Fatalf("the next Publish: %v", err)
	}
	if info, err := s.Info(ctx); err != nil || info.State.Msgs != 2 {
		t.Errorf("stream info %+v, %v; want the two small messages", info, err)
	}
}

// TestJetStreamNotAnsweringIsUnavailable: no responders because JetStream
// itself is down is the destination's outage, unlike a subject no stream
// covers (TestNoStreamIsRetryable).
func TestJetStreamNotAnsweringIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := testenv.EmbeddedNATS(t, "", -1)
	url := srv.ClientURL()
	ctx := testenv.Context(t, 30*time.Second)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	d := newDest(t, natsdest.Options{Servers: []string{url}, Subject: "s.{{ topic }}", AckTimeout: 3 * time.Second})
	if err := d.Publish(ctx, []outbox.Message{msg("a")}); err != nil {
		t.Fatal(err)
	}
	if err := srv.DisableJetStream(); err != nil {
		t.Fatal(err)
	}
	err = d.Publish(ctx, []outbox.Message{msg("b"), msg("c")})
	for i := range 2 {
		if e := destination.ErrorAt(err, i); !outbox.IsUnavailable(e) {
			t.Errorf("message %d with JetStream down: %v; want unavailable", i, e)
		}
	}
}

// TestPublishEachReportsEachAck: PublishEach reports every message once,
// refused ones as soon as the server refuses them, while acknowledged ones
// of the same batch do not wait for them; the connection stays up.
func TestPublishEachReportsEachAck(t *testing.T) {
	t.Parallel()
	url, _ := deniedServer(t)
	d := newDest(t, natsdest.Options{Servers: []string{url}, Subject: "{{ topic }}", AckTimeout: 20 * time.Second})
	msgs := []outbox.Message{msg("ORD.ok.a"), msg("ORD.denied.x"), msg("ORD.ok.b")}
	got := make(chan int, len(msgs))
	errs := make([]error, len(msgs))
	start := time.Now()
	d.PublishEach(testenv.Context(t, 30*time.Second), msgs, func(i int, err error) {
		errs[i] = err
		got <- i
	})
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("PublishEach took %v; want every outcome well before the ack timeout", took)
	}
	close(got)
	seen := map[int]int{}
	for i := range got {
		seen[i]++
	}
	for i := range msgs {
		if seen[i] != 1 {
			t.Errorf("done called %d times for message %d", seen[i], i)
		}
	}
	if errs[0] != nil || errs[2] != nil || errs[1] == nil {
		t.Errorf("outcomes %v; want the denied one failed, the others acknowledged", errs)
	}
}
