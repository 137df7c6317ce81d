package nats_test

import (
	"context"
	"fmt"
	"log/slog"
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

// TestDeniedSubjectFailsItsMessagesAtOnce: a subject the relay's user may
// not publish to (the server reports a permissions violation, and no
// PubAck comes) fails the messages published to it as soon as the server
// says so, as an ordinary failure that spends an attempt; the other
// messages of the batch are acknowledged. Before, such a message waited
// AckTimeout and failed as "destination down": it spent no attempt, never
// died, and opened the circuit for every subject of the destination.
func TestDeniedSubjectFailsItsMessagesAtOnce(t *testing.T) {
	t.Parallel()
	url, js := deniedServer(t)
	ctx := testenv.Context(t, 30*time.Second)
	const ackTimeout = 20 * time.Second
	d := newDest(t, natsdest.Options{Servers: []string{url}, Subject: "{{ topic }}", AckTimeout: ackTimeout})

	for _, batch := range [][]outbox.Message{
		{msg("ORD.ok.a"), msg("ORD.denied.x"), msg("ORD.ok.b"), msg("ORD.denied.y")},
		{msg("ORD.denied.z")}, // alone in its batch: still not "destination down"
	} {
		start := time.Now()
		err := d.Publish(ctx, batch)
		if took := time.Since(start); took >= ackTimeout/2 {
			t.Errorf("Publish took %v; want the refusal at once, not after the %v ack timeout", took, ackTimeout)
		}
		for i, m := range batch {
			e := destination.ErrorAt(err, i)
			denied := strings.HasPrefix(m.Topic, "ORD.denied.")
			switch {
			case denied && (e == nil || outbox.IsUnavailable(e) || outbox.IsPermanent(e) || !strings.Contains(e.Error(), "denies the relay's user publish")):
				t.Errorf("%s: %v; want a retryable failure naming the permission, not unavailable", m.Topic, e)
			case !denied && e != nil:
				t.Errorf("%s: %v; want acknowledged", m.Topic, e)
			}
		}
	}
	// Many refusals: later publishes to a denied subject fail without
	// being sent, and the futures of those that were sent keep window
	// slots until they resolve. Before, each refused publish freed its
	// slot at once while its future stayed in jetstream's bounded table
	// of outstanding publishes, and past 4,000 of them every publish of
	// the destination stalled and failed, allowed subjects too.
	start := time.Now()
	for range 6 {
		var batch []outbox.Message
		for range 1000 {
			batch = append(batch, msg("ORD.denied.many"))
		}
		if err := d.Publish(ctx, batch); destination.ErrorAt(err, 999) == nil {
			t.Fatalf("a batch to a denied subject: %v; want it refused", err)
		}
	}
	if err := d.Publish(ctx, []outbox.Message{msg("ORD.ok.c"), msg("ORD.ok.d")}); err != nil {
		t.Fatalf("allowed subjects after 6,000 refusals: %v; want both acknowledged", err)
	}
	if took := time.Since(start); took >= ackTimeout/2 {
		t.Fatalf("6,000 refusals and two allowed messages took %v; want no stall of the destination (jetstream stalls past 4,000 outstanding publishes)", took)
	}
	s, err := js.Stream(ctx, "ORD")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 4 {
		t.Fatalf("stream holds %d messages; want the 4 allowed", info.State.Msgs)
	}
}

// TestDeniedBurstLeavesTheWindowFree: a burst to a denied subject larger
// than the window (MaxPending 16, 40 messages) fails at once, and messages
// to allowed subjects right after it are acknowledged without waiting for
// the refused publishes' acks to time out: a refused publish moves its
// window slot to a budget of its own. (With the slot held until the
// future resolved, the burst and the allowed messages after it waited the
// whole ack timeout, found by a review.)
func TestDeniedBurstLeavesTheWindowFree(t *testing.T) {
	t.Parallel()
	url, _ := deniedServer(t)
	ctx := testenv.Context(t, 30*time.Second)
	const ackTimeout = 6 * time.Second
	d := newDest(t, natsdest.Options{Servers: []string{url}, Subject: "{{ topic }}", AckTimeout: ackTimeout, MaxPending: 16})
	var burst []outbox.Message
	for range 40 {
		burst = append(burst, msg("ORD.denied.burst"))
	}
	start := time.Now()
	err := d.Publish(ctx, burst)
	for i := range burst {
		if e := destination.ErrorAt(err, i); e == nil || !strings.Contains(e.Error(), "denies the relay's user publish") {
			t.Fatalf("burst message %d: %v; want refused", i, e)
		}
	}
	if err := d.Publish(ctx, []outbox.Message{msg("ORD.ok.after1"), msg("ORD.ok.after2")}); err != nil {
		t.Fatalf("allowed messages after the burst: %v", err)
	}
	if took := time.Since(start); took >= ackTimeout/2 {
		t.Fatalf("a denied burst and two allowed messages took %v; want neither to wait for the refused acks to time out (%v)", took, ackTimeout)
	}
}

// TestStreamAtStartNamesTheFix: a configured stream that does not exist
// fails New with the fix named; with createStream, a stream that exists
// already is reported as existing, not as created (queuebox check, which
// connects the destination as run does, creates it first).
func TestStreamAtStartNamesTheFix(t *testing.T) {
	t.Parallel()
	url := testenv.NATSURL(t)
	name := strings.ReplaceAll(testenv.UniqueName("QBSTART"), ".", "_")
	subj := testenv.UniqueName("qbt") + ".start"
	_, err := natsdest.New(testenv.Context(t, 10*time.Second), natsdest.Options{Servers: []string{url}, Subject: subj, Stream: name}, nil)
	if err == nil || !strings.Contains(err.Error(), "does not exist: create it") || !strings.Contains(err.Error(), "createStream") {
		t.Fatalf("New with a missing stream: %v; want the fix named", err)
	}
	var logs testenv.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	for range 2 {
		d, err := natsdest.New(testenv.Context(t, 10*time.Second), natsdest.Options{Servers: []string{url}, Subject: subj, Stream: name, CreateStream: true}, log)
		if err != nil {
			t.Fatal(err)
		}
		_ = d.Close()
	}
	t.Cleanup(func() {
		nc, err := nats.Connect(url)
		if err == nil {
			js, _ := jetstream.New(nc)
			_ = js.DeleteStream(context.Background(), name)
			nc.Close()
		}
	})
	out := logs.String()
	if strings.Count(out, "nats stream created") != 1 || strings.Count(out, "nats stream exists") != 1 {
		t.Fatalf("two starts with createStream logged:\n%s\nwant one 'created', then one 'exists'", out)
	}
}

// deniedServer starts a NATS server whose user may publish anywhere but
// ORD.denied.>, with a stream ORD over ORD.>, and returns its URL (with the
// user's credentials) and a JetStream client of that user.
func deniedServer(t *testing.T) (string, jetstream.JetStream) {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "relay", Password: "pw", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"ORD.denied.>"}},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded NATS did not start")
	}
	t.Cleanup(srv.Shutdown)
	url := fmt.Sprintf("nats://relay:pw@127.0.0.1:%d", testenv.EmbeddedNATSPort(srv))
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORD", Subjects: []string{"ORD.>"}}); err != nil {
		t.Fatal(err)
	}
	return url, js
}
