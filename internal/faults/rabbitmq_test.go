package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/internal/testenv"
)

// TestFaultRabbitMQRestart drains 10,000 unkeyed rows to RabbitMQ (the
// rows/s of that drain is the relay's confirm-pipelined throughput), then
// restarts the RabbitMQ application (rabbitmqctl stop_app / start_app) in
// the middle of a second drain of 10,000 rows over 100 keys: nothing is lost, every message carries its
// row's id, per-key order holds for first deliveries, and duplicates (a
// confirm lost in the restart) carry the id of their original.
func TestFaultRabbitMQRestart(t *testing.T) {
	faultSuite(t)
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		t.Skip("rabbitmqctl not found: cannot restart RabbitMQ here")
	}
	pg := testenv.Postgres(t)
	url := testenv.AMQPURL(t)
	exchange := testenv.AMQPName(t, "qbf-x")
	queue := testenv.AMQPName(t, "qbf-q")
	declare := func() {
		conn, err := amqp.Dial(url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(queue, "#", exchange, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	declare()
	t.Cleanup(func() {
		if conn, err := amqp.Dial(url); err == nil {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(queue, false, false, false)
				_ = ch.ExchangeDelete(exchange, false, false)
			}
			_ = conn.Close()
		}
	})

	cfg := fmt.Sprintf(`database:
  url: %q
  outboxTable: %s.outbox
relay:
  pollInterval: 20ms
  backoff: {base: 200ms, max: 2s}
  circuitBreaker: {failures: 3, openFor: 1s, maxOpenFor: 2s}
server:
  listen: 127.0.0.1:0
destinations:
  billing:
    type: amqp
    url: %q
    exchange: %q
routes:
  - topicPattern: "**"
    destination: billing
`, pg.URL, pg.Schema, url, exchange)
	path := filepath.Join(t.TempDir(), "amqp.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	const keys, per = 100, 10000
	next := make([]int, keys)
	ctx := testenv.Context(t, 5*time.Minute)
	topic := func(int) string { return "billing.charged" }
	// The first drain is unkeyed, so that its rate measures the publish
	// path (batches of relay.batchSize, confirms pipelined) rather than the
	// per-key order limit of 100 keys.
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, payload)
		SELECT 'billing.charged', json_build_object('n', i) FROM generate_series(1, $1) i`, per)
	sent := func() int {
		var n int
		if err := pg.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE state = 'sent'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	p := startQueuebox(t, "relay", "run", "--config", path)
	addr := p.ManagementAddr()
	start := time.Now()
	testenv.Eventually(t, 2*time.Minute, func() bool { return sent() == per }, "first drain did not finish")
	rate := float64(per) / time.Since(start).Seconds()
	t.Logf("first drain: %d unkeyed rows at %.0f rows/s", per, rate)
	text := testenv.Scrape(t, addr)
	publishes := testenv.Metric(text, `queuebox_publish_duration_seconds_count{destination="billing"}`)
	publishMs := 1000 * testenv.Metric(text, `queuebox_publish_duration_seconds_sum{destination="billing"}`) / max(publishes, 1)
	t.Logf("first drain: %.0f publishes of up to 100 messages, %.1f ms each on average (one confirm round trip per message would be ~100 of them)", publishes, publishMs)

	// Second drain, with a restart in the middle.
	if err := testenv.InsertKeyed(ctx, pg.Pool, per, next, topic); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() bool { return sent() >= per+2000 }, "second drain made no progress")
	// Whatever happens next, leave RabbitMQ running for the tests after us.
	t.Cleanup(func() { _ = exec.Command("rabbitmqctl", "start_app").Run() })
	rabbitmqctl(t, "stop_app")
	stoppedAt := time.Now()
	rabbitmqctl(t, "start_app")
	outage := time.Since(stoppedAt)
	declare() // durable: already there; re-declaring is a no-op that proves the broker is back
	backAt := time.Now()
	testenv.Eventually(t, 2*time.Minute, func() bool { return sent() == 2*per }, "rows not all sent after the RabbitMQ restart")
	recover := time.Since(backAt)
	p.Stop(syscall.SIGTERM, 20*time.Second)

	// Read the whole queue.
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{} // id -> key
	rows, err := pg.Pool.Query(ctx, `SELECT id::text, coalesce(key, '') FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, key string
		if err := rows.Scan(&id, &key); err != nil {
			t.Fatal(err)
		}
		ids[id] = key
	}
	seen := map[string]int{}
	last := map[string]int{}
	dups := 0
	for {
		m, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		key, known := ids[m.MessageId]
		if !known {
			t.Fatalf("message_id %q is no row's id", m.MessageId)
		}
		if h, _ := m.Headers["x-message-key"].(string); h != key {
			t.Fatalf("message %s carries key %q, its row has %q", m.MessageId, h, key)
		}
		seen[m.MessageId]++
		if seen[m.MessageId] > 1 {
			dups++
			continue
		}
		var body struct {
			N int `json:"n"`
		}
		_ = json.Unmarshal(m.Body, &body)
		if key == "" {
			continue // unkeyed rows have no order
		}
		if prev, ok := last[key]; ok && body.N <= prev {
			t.Fatalf("key %s: n=%d arrived after n=%d", key, body.N, prev)
		}
		last[key] = body.N
	}
	if len(seen) != 2*per {
		t.Fatalf("queue held %d distinct ids, want %d (lost messages)", len(seen), 2*per)
	}
	t.Logf("FIGURES rabbitmq: first drain %d unkeyed rows at %.0f rows/s (publisher confirms pipelined, batch 100); restart: stop_app+start_app %.1fs, all sent %.2fs after the broker was back, %d distinct ids, %d duplicates (same ids), per-key order held",
		per, rate, outage.Seconds(), recover.Seconds(), len(seen), dups)
}

func rabbitmqctl(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %v: %v\n%s", args, err, out)
	}
}
