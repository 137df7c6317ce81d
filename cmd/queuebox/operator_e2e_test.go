package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testenv"
)

// flakyReceiver answers 500 while failing is set (for the rows selected by
// fails), and records what it accepts.
type flakyReceiver struct {
	failing atomic.Bool
	fails   func(n int) bool
	mu      sync.Mutex
	got     []delivery
}

func (f *flakyReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		N int `json:"n"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	if f.failing.Load() && (f.fails == nil || f.fails(body.N)) {
		http.Error(w, "receiver is broken", http.StatusInternalServerError)
		return
	}
	f.mu.Lock()
	f.got = append(f.got, delivery{ID: r.Header.Get("X-Message-Id"), Key: r.Header.Get("X-Message-Key"),
		Topic: r.Header.Get("X-Topic"), Attempt: r.Header.Get("X-Attempt"), N: body.N})
	f.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (f *flakyReceiver) deliveries() []delivery {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]delivery(nil), f.got...)
}

func cliOut(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	cmd.Env = append(os.Environ(), "QUEUEBOX_CONFIG=")
	out, _ := cmd.Output()
	return cmd.ProcessState.ExitCode(), string(out)
}

// TestDeadListAndReplayRoundTrip is issue 3's first acceptance scenario: a
// receiver answering 500 kills rows of max_attempts 1 with the status in
// last_error; dead list shows them; replay --topic returns them; once the
// receiver answers 200 they are sent with the same ids and X-Attempt 0.
func TestDeadListAndReplayRoundTrip(t *testing.T) {
	w := newWorld(t, 0)
	recv := &flakyReceiver{}
	recv.failing.Store(true)
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	w.hooks.srv = srv // route hook.* to the flaky receiver
	cfg := w.config(t, "pollInterval: 20ms")

	insert(t, w.pg.Pool, 20, 20, func(int) string { return "hook.failing" })
	if _, err := w.pg.Pool.Exec(context.Background(), `UPDATE outbox SET max_attempts = 1`); err != nil {
		t.Fatal(err)
	}
	p := startQueuebox(t, "run", "--config", cfg)
	testenv.Eventually(t, 30*time.Second, func() bool { return countStates(t, w.pg.Pool)["dead"] == 20 }, "rows did not go dead")

	code, out := cliOut(t, "dead", "list", "--config", cfg, "--output", "json")
	if code != 0 {
		t.Fatalf("dead list exit %d: %s", code, out)
	}
	var dead []struct {
		ID        string `json:"id"`
		Topic     string `json:"topic"`
		Attempt   int    `json:"attempt"`
		LastError string `json:"lastError"`
	}
	if err := json.Unmarshal([]byte(out), &dead); err != nil {
		t.Fatalf("dead list --output json is not JSON: %v\n%s", err, out)
	}
	if len(dead) != 20 {
		t.Fatalf("dead list shows %d rows, want 20", len(dead))
	}
	deadIDs := map[string]bool{}
	for _, d := range dead {
		if d.Attempt != 1 || !strings.Contains(d.LastError, "500") || d.Topic != "hook.failing" {
			t.Fatalf("dead row %+v: want attempt 1, topic hook.failing and the status in last_error", d)
		}
		deadIDs[d.ID] = true
	}

	// An id the table's uuid column cannot hold is a usage error, and
	// moves nothing.
	if code, out := cliOut(t, "replay", "--config", cfg, "--id", "order-42"); code != 2 {
		t.Fatalf("replay --id order-42 on a uuid table: exit %d, want 2 (usage)\n%s", code, out)
	}
	recv.failing.Store(false)
	code, out = cliOut(t, "replay", "--config", cfg, "--topic", "hook.*")
	if code != 0 || !strings.Contains(out, "20") {
		t.Fatalf("replay exit %d: %s", code, out)
	}
	waitAllSent(t, w.pg.Pool, 20, 30*time.Second)
	p.Stop(syscall.SIGTERM, 20*time.Second)
	got := recv.deliveries()
	if len(got) != 20 {
		t.Fatalf("receiver accepted %d deliveries after the replay, want 20", len(got))
	}
	for _, d := range got {
		if !deadIDs[d.ID] {
			t.Fatalf("replayed delivery carries id %s, which was not a dead row's id", d.ID)
		}
		if d.Attempt != "0" {
			t.Fatalf("replayed delivery %s has X-Attempt %q, want 0", d.ID, d.Attempt)
		}
	}
}

// TestHeldKeyWaitsForReplay is issue 3's second scenario: with onDead: hold
// a key whose head died keeps its later rows pending (visible in stats);
// replaying the head delivers the whole key in order.
func TestHeldKeyWaitsForReplay(t *testing.T) {
	w := newWorld(t, 0)
	recv := &flakyReceiver{fails: func(n int) bool { return n == 0 }}
	recv.failing.Store(true)
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	w.hooks.srv = srv
	cfg := w.config(t, "pollInterval: 20ms\nonDead: hold")

	insert(t, w.pg.Pool, 10, 1, func(int) string { return "hook.step" }) // key-000, n = 0..9
	if _, err := w.pg.Pool.Exec(context.Background(), `UPDATE outbox SET max_attempts = 1`); err != nil {
		t.Fatal(err)
	}
	p := startQueuebox(t, "run", "--config", cfg)
	testenv.Eventually(t, 30*time.Second, func() bool { return countStates(t, w.pg.Pool)["dead"] == 1 }, "the head did not die")
	// Give the relay time to (wrongly) deliver later rows of the held key.
	time.Sleep(500 * time.Millisecond)
	if c := countStates(t, w.pg.Pool); c["pending"] != 9 || c["sent"] != 0 {
		t.Fatalf("held key: states %v, want 1 dead and 9 pending", c)
	}
	code, out := cliOut(t, "stats", "--config", cfg, "--output", "json", "--relay", p.ManagementAddr())
	if code != 0 {
		t.Fatalf("stats exit %d: %s", code, out)
	}
	var st struct {
		Circuits map[string]string `json:"circuits"`
		HeldKeys []struct {
			Key     string `json:"key"`
			DeadID  string `json:"deadId"`
			Waiting int64  `json:"waiting"`
		} `json:"heldKeys"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("stats json: %v\n%s", err, out)
	}
	if len(st.HeldKeys) != 1 || st.HeldKeys[0].Key != "key-000" || st.HeldKeys[0].Waiting != 9 {
		t.Fatalf("stats heldKeys = %+v, want key-000 with 9 waiting", st.HeldKeys)
	}
	// A 500 is the receiver's answer, not a connection failure: the circuit
	// stays closed, and stats shows it from the running relay.
	if st.Circuits["hooks"] != "closed" || st.Circuits["events"] != "closed" {
		t.Fatalf("stats circuits = %v, want events and hooks closed", st.Circuits)
	}

	recv.failing.Store(false)
	if code, out := cliOut(t, "replay", "--config", cfg, "--id", st.HeldKeys[0].DeadID); code != 0 {
		t.Fatalf("replay exit %d: %s", code, out)
	}
	waitAllSent(t, w.pg.Pool, 10, 30*time.Second)
	p.Stop(syscall.SIGTERM, 20*time.Second)
	got := recv.deliveries()
	if len(got) != 10 {
		t.Fatalf("receiver accepted %d deliveries, want 10", len(got))
	}
	for i, d := range got {
		if d.N != i {
			t.Fatalf("delivery %d carries n=%d: the key was not delivered in order after the replay", i, d.N)
		}
	}
}
