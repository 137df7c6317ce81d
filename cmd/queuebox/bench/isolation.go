package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// The isolation cases measure the relay at its defaults where a receiver
// is slow, not against the bare loop:
//
//   - webhook: rows over Keys keys to a webhook that answers every request
//     in webhookLatency. The relay's per-destination limit adapts to it;
//     the ceiling is keys ÷ latency.
//   - skewed: one key in a hundred goes to a webhook that answers in
//     skewLatency, the rest to JetStream. The figure is the rate of the
//     rest, against the same drain when the webhook answers at once.

const (
	webhookLatency = 50 * time.Millisecond
	webhookTarget  = 5000 // rows/s the webhook case should reach
	skewLatency    = time.Second
	skewShare      = 100 // one key in skewShare is slow
)

// Isolation is one isolation case; it is what --output json prints.
type Isolation struct {
	Case    string  `json:"case"`
	Rows    int     `json:"rows"`
	Keys    int     `json:"keys"`
	Latency float64 `json:"receiverLatencyMs"`
	// RowsPerSec is the rate of the whole drain (webhook), or of the keys
	// that were not slow (skewed).
	RowsPerSec float64 `json:"rowsPerSec"`
	// Baseline is, for skewed, the rate of the same keys when the slow
	// ones are not; Ratio is RowsPerSec ÷ Baseline. Target is the rate the
	// webhook case should reach.
	Baseline float64 `json:"baselineRowsPerSec,omitempty"`
	Ratio    float64 `json:"ratio,omitempty"`
	Target   float64 `json:"targetRowsPerSec,omitempty"`
	Error    string  `json:"error,omitempty"`
}

// slowReceiver is a webhook that answers after a delay: every request, or
// those whose topic ends in ".slow".
type slowReceiver struct {
	srv   *http.Server
	url   string
	delay atomic.Int64 // ns
	all   bool
	run   atomic.Pointer[receipts]
}

func newSlowReceiver(ctx context.Context, all bool) (*slowReceiver, error) {
	r := &slowReceiver{all: all}
	var err error
	if r.srv, r.url, err = serveLoopback(ctx, r); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *slowReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	_, _ = io.Copy(io.Discard, req.Body)
	if r.all || strings.HasSuffix(req.Header.Get("X-Topic"), ".slow") {
		time.Sleep(time.Duration(r.delay.Load()))
	}
	if run := r.run.Load(); run != nil {
		if id := req.Header.Get("X-Message-Id"); id != "" {
			run.add(id, time.Now())
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (r *slowReceiver) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
}

// runWebhook drains rows over keys to a webhook answering in
// webhookLatency, the relay at its defaults.
func runWebhook(ctx context.Context, w *world, o *Options, tmp string) Isolation {
	rows, keys := max(o.Rows/10, 100), o.Keys
	is := Isolation{Case: "webhook", Rows: rows, Keys: keys, Latency: ms(webhookLatency), Target: webhookTarget}
	recv, err := newSlowReceiver(ctx, true)
	if err != nil {
		is.Error = err.Error()
		return is
	}
	defer recv.close()
	recv.delay.Store(int64(webhookLatency))
	rate, err := drainTo(ctx, w, o, tmp, rows, keys, func(topic string) (string, *receipts) {
		r := newReceipts(rows)
		recv.run.Store(r)
		return isolationConfig(o, topic, "", "", recv.url), r
	}, "")
	recv.run.Store(nil)
	if err != nil {
		is.Error = err.Error()
		return is
	}
	is.RowsPerSec = rate
	return is
}

// runSkewed drains rows over keys, one key in skewShare to a webhook, the
// rest to JetStream, once with the webhook answering at once and once with
// it answering in skewLatency, and compares the rate of the other keys.
func runSkewed(ctx context.Context, w *world, o *Options, tmp string) Isolation {
	rows, keys := max(o.Rows/5, 1000), o.Keys
	slow := max(keys/skewShare, 1)
	is := Isolation{Case: "skewed", Rows: rows, Keys: keys, Latency: ms(skewLatency)}
	recv, err := newSlowReceiver(ctx, false)
	if err != nil {
		is.Error = err.Error()
		return is
	}
	defer recv.close()
	// Keys k0..k<slow-1> get the topic <topic>.slow (routed to the webhook).
	for i, delay := range []time.Duration{0, skewLatency} {
		recv.delay.Store(int64(delay))
		rate, err := drainTo(ctx, w, o, tmp, rows, keys, func(topic string) (string, *receipts) {
			return isolationConfig(o, topic, w.natsURL, topic, recv.url), nil
		}, fmt.Sprintf("UPDATE outbox SET topic = topic || '.slow' WHERE key = ANY(array(SELECT 'k' || g FROM generate_series(0, %d) g))", slow-1))
		if err != nil {
			is.Error = err.Error()
			return is
		}
		if i == 0 {
			is.Baseline = rate
		} else {
			is.RowsPerSec = rate
		}
	}
	if is.Baseline > 0 {
		is.Ratio = is.RowsPerSec / is.Baseline
	}
	return is
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// isolationConfig is the YAML of one isolation drain: the relay at its
// defaults (batch size from the flags), topic's rows to JetStream subject
// subject when natsURL is set and to the webhook otherwise, rows of
// <topic>.slow to the webhook.
func isolationConfig(o *Options, topic, natsURL, subject, hookURL string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "relay:\n  batchSize: %d\n", o.BatchSize)
	b.WriteString("server:\n  listen: \"\"\nlog:\n  level: info\n  format: text\ndestinations:\n")
	fmt.Fprintf(&b, "  hooks:\n    type: http\n    url: %q\n    timeout: 30s\n", hookURL+"/hooks/{{ topic }}")
	if natsURL != "" {
		fmt.Fprintf(&b, "  events:\n    type: nats\n    servers: [%q]\n    subject: %q\n", natsURL, subject)
		fmt.Fprintf(&b, "routes:\n  - topicPattern: %q\n    destination: hooks\n  - topicPattern: \"**\"\n    destination: events\n", topic+".slow")
	} else {
		b.WriteString("routes:\n  - topicPattern: \"**\"\n    destination: hooks\n")
	}
	return b.String()
}

// drainTo inserts rows over keys into a fresh schema (then runs prepare,
// an UPDATE, when set), starts one relay with the configuration setup
// returns (the database section is added), and returns the rate of the
// rows that are not of a .slow topic: until every one of them is sent, from
// the relay's start. setup may return receipts to wait on instead of the
// table.
func drainTo(ctx context.Context, w *world, o *Options, tmp string, rows, keys int,
	setup func(topic string) (string, *receipts), prepare string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	s, err := w.newSchema(ctx)
	if err != nil {
		return 0, err
	}
	defer s.close()
	topic := topicFor()
	if err := s.insert(ctx, topic, rows, keys, o.PayloadSize); err != nil {
		return 0, err
	}
	if prepare != "" {
		if _, err := s.pool.Exec(ctx, prepare); err != nil {
			return 0, fmt.Errorf("bench: %w", err)
		}
	}
	var fast int64
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE topic NOT LIKE '%.slow'").Scan(&fast); err != nil {
		return 0, err
	}
	yml, r := setup(topic)
	if natsStream := strings.Contains(yml, "type: nats"); natsStream {
		st, err := w.stream(ctx, topic)
		if err != nil {
			return 0, err
		}
		defer func() { _ = w.js.DeleteStream(context.WithoutCancel(ctx), st.CachedInfo().Config.Name) }()
	}
	cfg := relayConfig{Raw: fmt.Sprintf("database:\n  type: postgresql\n  url: %q\n  outboxTable: outbox\n", s.url) + yml}
	reps, err := startReplicas(ctx, o.Binary, tmp, cfg, 1)
	if err != nil {
		return 0, err
	}
	defer stopReplicas(reps)
	start := reps[0].startAt
	var done time.Time
	if r != nil {
		if done, err = r.wait(ctx, "webhook"); err != nil {
			return 0, err
		}
	} else {
		for {
			var left int64
			if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE state IN ('pending','processing') AND topic NOT LIKE '%.slow'").Scan(&left); err != nil {
				return 0, err
			}
			if left == 0 {
				done = time.Now()
				break
			}
			if !sleepCtx(ctx, 20*time.Millisecond) {
				return 0, ctx.Err()
			}
		}
	}
	return float64(fast) / done.Sub(start).Seconds(), nil
}
