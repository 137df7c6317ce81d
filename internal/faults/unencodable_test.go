package faults

// A row the protocol cannot encode: permanent, so it dies at its first
// attempt with the reason, and nothing else notices (its key's other rows,
// the other keys, the destination's circuit).

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/internal/testenv"
)

// unencodable is one protocol's case of TestFaultUnencodableRow.
type unencodable struct {
	proto string
	// dest is the destination's name; topic the topic of every row.
	dest, topic string
	// badKey and badHeaders make the row the protocol cannot carry.
	badKey, badHeaders string
	// reason is what the dead row's last_error must say.
	reason []string
	// setup builds the protocol's world and returns the destination's
	// YAML body and a reader of everything the destination got.
	setup func(t *testing.T, pg *testenv.PG) (destYAML string, read func() []Delivery)
}

// TestFaultUnencodableRow: per protocol, 20 good rows over 4 keys and one
// row the protocol cannot encode. That row is dead at attempt 1 with the
// reason; the 20 are delivered, in order per key; the circuit stays closed.
func TestFaultUnencodableRow(t *testing.T) {
	faultSuite(t)
	cases := []unencodable{
		{
			// A key with a space, rendered into the subject.
			proto: "nats", dest: "events", topic: "order.created", badKey: "bad key",
			reason: []string{"subject", "whitespace"},
			setup: func(t *testing.T, pg *testenv.PG) (string, func() []Delivery) {
				w := &world{t: t, pg: pg, dbURL: pg.URL, natsURL: testenv.NATSURL(t), subject: testenv.UniqueName("qbf")}
				_, s := testenv.NATSStream(t, w.natsURL, w.subject+".>")
				w.stream = s.CachedInfo().Config.Name
				return fmt.Sprintf("type: nats\nservers: [%q]\nsubject: \"%s.{{ key }}\"\nstream: %s", w.natsURL, w.subject, w.stream), w.streamMessages
			},
		},
		{
			// A row header value with a line break, on a key with good rows
			// before and after it.
			proto: "http", dest: "hooks", topic: "hook.created", badKey: "key-001", badHeaders: `{"X-Trace": "a\nb"}`,
			reason: []string{"X-Trace", "line break"},
			setup: func(t *testing.T, pg *testenv.PG) (string, func() []Delivery) {
				r := newReceiver(t)
				return fmt.Sprintf("type: http\nurl: \"%s/hooks/{{ topic }}\"", r.URL()), r.deliveries
			},
		},
		{
			// A key with a space, rendered into the topic: a name Kafka refuses.
			proto: "kafka", dest: "ledger", topic: "ledger.created", badKey: "bad key",
			reason: []string{"topic name", "Kafka allows"},
			setup: func(t *testing.T, pg *testenv.PG) (string, func() []Delivery) {
				prefix := testenv.KafkaTopicName(t, "qbf")
				var topics []testenv.KafkaTopic
				var names []string
				for k := range 4 {
					name := fmt.Sprintf("%s.key-%03d", prefix, k)
					topics = append(topics, testenv.KafkaTopic{Name: name, Partitions: 2})
					names = append(names, name)
				}
				k := testenv.Kafka(t, topics)
				read := func() []Delivery {
					var out []Delivery
					// One more than the good rows: the bad one must not be there.
					for _, r := range testenv.KafkaConsume(t, k.Brokers, 21, 3*time.Second, names...) {
						out = append(out, Delivery{Dest: "ledger", ID: r.Headers["X-Message-Id"], Key: string(r.Key), Topic: r.Headers["X-Topic"], N: payloadN(r.Value)})
					}
					return out
				}
				brokers, _ := json.Marshal(k.Brokers)
				return fmt.Sprintf("type: kafka\nbrokers: %s\ntopic: \"%s.{{ key }}\"", brokers, prefix), read
			},
		},
		{
			// A 255-character key rendered into a routing key of 258 bytes.
			proto: "amqp", dest: "billing", topic: "billing.charged", badKey: strings.Repeat("k", 255),
			reason: []string{"routing key of 258 bytes", "255"},
			setup: func(t *testing.T, pg *testenv.PG) (string, func() []Delivery) {
				url := testenv.AMQPURL(t)
				admin := testenv.NewAMQPAdmin(t, url)
				exchange := testenv.AMQPName(t, "qbf-x")
				admin.Exchange(exchange, "topic")
				queue := admin.Queue("qbf-q", exchange, "#")
				read := func() []Delivery { return amqpDeliveries("billing", admin.Consume(queue, 21, 3*time.Second)) }
				return fmt.Sprintf("type: amqp\nurl: %q\nexchange: %q\nroutingKey: \"rk.{{ key }}\"", url, exchange), read
			},
		},
	}
	for _, c := range cases {
		t.Run(c.proto, func(t *testing.T) { unencodableRow(t, c) })
	}
}

func unencodableRow(t *testing.T, c unencodable) {
	resetKeys()
	pg := testenv.Postgres(t)
	destYAML, read := c.setup(t, pg)
	ctx := testenv.Context(t, time.Minute)
	topicOf := func(int) string { return c.topic }
	insert(t, pg.Pool, 10, 4, topicOf)
	headers := c.badHeaders
	if headers == "" {
		headers = "{}"
	}
	var badID string
	if err := pg.Pool.QueryRow(ctx, `INSERT INTO outbox (topic, key, payload, headers) VALUES ($1, $2, '{"n": -1}', $3::jsonb) RETURNING id::text`,
		c.topic, c.badKey, headers).Scan(&badID); err != nil {
		t.Fatal(err)
	}
	insert(t, pg.Pool, 10, 4, topicOf)
	cfg := relayConfig(t, pg, "pollInterval: 20ms\nbackoff: {base: 100ms, max: 1s}\ncircuitBreaker: {failures: 3, openFor: 500ms, maxOpenFor: 2s}",
		c.dest, destYAML)
	queuebox(t) // built before the clock starts
	start := time.Now()
	p := startQueuebox(t, "relay", "run", "--config", cfg)
	p.ManagementAddr()
	settled := waitSettled(t, pg.Pool, time.Minute)
	circuitClosed(t, p, c.dest)
	if code := p.Stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM", code)
	}

	var state, lastErr string
	var attempt int
	if err := pg.Pool.QueryRow(ctx, `SELECT state, attempt, coalesce(last_error, '') FROM outbox WHERE id = $1`, badID).Scan(&state, &attempt, &lastErr); err != nil {
		t.Fatal(err)
	}
	if state != "dead" || attempt != 1 {
		t.Fatalf("the row %s cannot encode is %s at attempt %d (last_error %q), want dead at attempt 1", c.proto, state, attempt, lastErr)
	}
	mustContain(t, "last_error", lastErr, c.reason...)
	r := mustCheck(t, Input{Rows: tableRows(t, pg.Pool, c.dest), Deliveries: read()})
	if r.Sent != 20 || r.Dead != 1 || r.Delivered != 20 || r.DeadDelivered != 0 {
		t.Fatalf("want the 20 good rows sent and delivered and only the bad one dead: %v", r)
	}
	figure(t, "unencodable-row/"+c.proto, r, fmt.Sprintf("bad_row=dead attempt=%d circuit=closed settled=%v last_error=%.140q",
		attempt, settled.Sub(start).Round(10*time.Millisecond), lastErr))
}

// relayConfig writes a configuration with one destination, dest (its YAML
// body destYAML), that takes every topic; relay is the relay section.
func relayConfig(t *testing.T, pg *testenv.PG, relay, dest, destYAML string) string {
	t.Helper()
	yml := fmt.Sprintf(`database:
  url: %q
  outboxTable: %s.outbox
relay:
%s
server:
  listen: 127.0.0.1:0
destinations:
  %s:
%s
routes:
  - topicPattern: "**"
    destination: %s
`, pg.URL, pg.Schema, indent(relay, "  "), dest, indent(destYAML, "    "), dest)
	path := filepath.Join(t.TempDir(), "queuebox.yaml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// tableRows reads the table for Check, every row routed to dest.
func tableRows(t *testing.T, pool *pgxpool.Pool, dest string) []Row {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	rows, err := pool.Query(ctx, `SELECT id::text, coalesce(key, ''), topic, sequence, coalesce((payload->>'n')::int, -1), state, coalesce(last_error, '')
		FROM outbox ORDER BY sequence`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		r := Row{Dest: dest}
		if err := rows.Scan(&r.ID, &r.Key, &r.Topic, &r.Sequence, &r.N, &r.State, &r.LastError); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// payloadN is the "n" of a JSON payload, -1 without one.
func payloadN(b []byte) int {
	body := struct {
		N int `json:"n"`
	}{N: -1}
	_ = json.Unmarshal(b, &body)
	return body.N
}
