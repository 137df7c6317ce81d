package faults

// No room: the destination is up but full. Its rows wait without spending
// attempts, the destination pauses and says so, and when room returns
// everything goes out once, in order per key.

import (
	"context"
	"fmt"
	"math"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/internal/testenv"
)

// fullFor is how long a scenario keeps its destination full.
func fullFor() time.Duration {
	if soak() {
		return 30 * time.Second
	}
	return 10 * time.Second
}

// TestFaultStreamFull: a JetStream stream of at most 100 messages that
// refuses new ones (discard: new) gets 300 rows over 30 keys with
// max_attempts 3. While it is full no row dies or spends an attempt, and
// the relay counts and logs the back-pressure; once the limit is lifted
// all 300 are stored once each, in order per key.
func TestFaultStreamFull(t *testing.T) {
	faultSuite(t)
	resetKeys()
	const total, keys, room = 300, 30, 100
	w := &world{t: t, pg: testenv.Postgres(t), natsURL: testenv.NATSURL(t), subject: testenv.UniqueName("qbf")}
	w.dbURL = w.pg.URL
	js, s := testenv.NATSStreamConfig(t, w.natsURL, jetstream.StreamConfig{
		Subjects: []string{w.subject + ".>"}, MaxMsgs: room, Discard: jetstream.DiscardNew,
	})
	w.stream = s.CachedInfo().Config.Name
	w.hooks = newReceiver(t)
	w.watchWire() // every publish, the refused ones included
	cfg := w.config("batchSize: 50\npollInterval: 20ms\nbackoff: {base: 100ms, max: 1s}\ncircuitBreaker: {failures: 3, openFor: 500ms, maxOpenFor: 2s}", "")
	p := startQueuebox(t, "relay", "run", "--config", cfg)
	addr := p.ManagementAddr()
	before := metricSum(testenv.Scrape(t, addr), `queuebox_destination_backpressure_total{destination="events"`)

	ctx := testenv.Context(t, 2*time.Minute)
	w.pg.MustExec(t, ctx, `ALTER TABLE outbox ALTER COLUMN max_attempts SET DEFAULT 3`)
	insert(t, w.pg.Pool, total, keys, orderTopic)
	testenv.Eventually(t, 30*time.Second, func() bool { return streamMsgs(t, s) == room }, "the stream never filled up")
	fullAt := time.Now()
	circuit := 0.0
	for time.Since(fullAt) < fullFor() {
		if dead, attempt := spent(t, w.pg.Pool); dead != 0 || attempt != 0 {
			t.Fatalf("%v into the full stream: %d rows dead, highest attempt %d; a full stream must spend no attempt\n%s",
				time.Since(fullAt).Round(time.Millisecond), dead, attempt, testenv.Tail(p.Logs(), 80))
		}
		circuit = max(circuit, testenv.Metric(testenv.Scrape(t, addr), `queuebox_destination_circuit_state{destination="events"}`))
		time.Sleep(200 * time.Millisecond)
	}
	during := countStates(t, w.pg.Pool)
	m := testenv.Scrape(t, addr)
	pressure := metricSum(m, `queuebox_destination_backpressure_total{destination="events"`)
	if pressure <= before {
		t.Fatalf("queuebox_destination_backpressure_total{destination=\"events\"} = %v after %v of a full stream (%v before)\n%s",
			pressure, fullFor(), before, testenv.Tail(p.Logs(), 80))
	}
	mustContain(t, "the relay's log", p.Logs(), "destination full", "stream_max_msgs")
	if during["sent"] != room {
		t.Fatalf("%d rows sent into a stream of %d messages: %v", during["sent"], room, during)
	}
	publishedWhileFull := w.wire.Load()

	cfgNow := s.CachedInfo().Config
	cfgNow.MaxMsgs = -1
	if _, err := js.UpdateStream(ctx, cfgNow); err != nil {
		t.Fatalf("lift the stream's limit: %v", err)
	}
	liftedAt := time.Now()
	settled := waitSettled(t, w.pg.Pool, time.Minute)
	if code := p.Stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM", code)
	}
	in := w.collect(time.Second)
	in.Published = nil // the wire count includes the refused publishes: not duplicates
	r := mustCheck(t, in)
	noStoredDuplicates(t, r)
	if r.Sent != total || r.Dead != 0 || r.Delivered != total {
		t.Fatalf("want %d sent and stored and none dead: %v", total, r)
	}
	figure(t, "stream-full", r, fmt.Sprintf("full_for=%v publishes_refused_while_full=%d backpressure=%v circuit_max=%v max_attempt=0 drain_after_lift=%v",
		fullFor(), publishedWhileFull-room, pressure-before, circuit, settled.Sub(liftedAt).Round(10*time.Millisecond)))
}

// TestFaultRabbitMQAlarm raises a RabbitMQ memory alarm (the broker blocks
// every publisher) while 500 rows over 50 keys wait for an amqp
// destination. During the alarm no row dies or spends an attempt and the
// relay reports resource_alarm; once it clears all 500 reach the queue,
// once each after deduplication on message_id, in order per key. (RabbitMQ
// tells a connection it is blocked only when it publishes: the batch
// written before the relay hears of it waits in the broker, is reported
// without room, and is stored again after the alarm: duplicates, same ids.)
func TestFaultRabbitMQAlarm(t *testing.T) {
	faultSuite(t)
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		if testenv.Required() {
			t.Fatalf("rabbitmqctl is required (QUEUEBOX_REQUIRE_SERVICES=1) to raise a RabbitMQ alarm: %v", err)
		}
		t.Skip("skipping: rabbitmqctl not found, cannot raise a RabbitMQ memory alarm here; set QUEUEBOX_REQUIRE_SERVICES=1 to fail instead")
	}
	resetKeys()
	const total, keys = 500, 50
	pg := testenv.Postgres(t)
	url := testenv.AMQPURL(t)
	admin := testenv.NewAMQPAdmin(t, url)
	exchange := testenv.AMQPName(t, "qbf-x")
	admin.Exchange(exchange, "topic")
	queue := admin.Queue("qbf-q", exchange, "#")
	cfg := relayConfig(t, pg, "batchSize: 50\npollInterval: 20ms\nbackoff: {base: 100ms, max: 1s}\ncircuitBreaker: {failures: 3, openFor: 500ms, maxOpenFor: 2s}",
		"billing", fmt.Sprintf("type: amqp\nurl: %q\nexchange: %q\ntimeout: 2s", url, exchange))
	p := startQueuebox(t, "relay", "run", "--config", cfg)
	addr := p.ManagementAddr()
	before := metricSum(testenv.Scrape(t, addr), `queuebox_destination_backpressure_total{destination="billing"`)

	raisedAt, clearAlarm := raiseMemoryAlarm(t)
	insert(t, pg.Pool, total, keys, func(int) string { return "billing.charged" })
	for time.Since(raisedAt) < fullFor() {
		if dead, attempt := spent(t, pg.Pool); dead != 0 || attempt != 0 {
			t.Fatalf("%v into the alarm: %d rows dead, highest attempt %d; an alarm must spend no attempt\n%s",
				time.Since(raisedAt).Round(time.Millisecond), dead, attempt, testenv.Tail(p.Logs(), 80))
		}
		time.Sleep(200 * time.Millisecond)
	}
	during := countStates(t, pg.Pool)
	m := testenv.Scrape(t, addr)
	pressure := metricSum(m, `queuebox_destination_backpressure_total{destination="billing"`)
	if pressure <= before {
		t.Fatalf("queuebox_destination_backpressure_total{destination=\"billing\"} = %v after %v of alarm (%v before)\n%s",
			pressure, fullFor(), before, testenv.Tail(p.Logs(), 80))
	}
	mustContain(t, "the relay's log", p.Logs(), "destination full", "resource_alarm")
	clearedAt := clearAlarm()
	settled := waitSettled(t, pg.Pool, time.Minute)
	if code := p.Stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM", code)
	}
	got := amqpDeliveries("billing", admin.Consume(queue, math.MaxInt, 3*time.Second))
	r := mustCheck(t, Input{Rows: tableRows(t, pg.Pool, "billing"), Deliveries: got})
	if r.Sent != total || r.Dead != 0 || r.Delivered != total {
		t.Fatalf("want %d sent and in the queue and none dead: %v", total, r)
	}
	figure(t, "rabbitmq-alarm", r, fmt.Sprintf("alarm_for=%v sent_during_alarm=%d backpressure=%v max_attempt=0 drain_after_clear=%v",
		clearedAt.Sub(raisedAt).Round(100*time.Millisecond), during["sent"], pressure-before, settled.Sub(clearedAt).Round(10*time.Millisecond)))
}

// watermarkRE matches a watermark eval prints as a tuple:
// {absolute,1073741824}, {absolute,"1GB"}, {relative,0.4}.
var watermarkRE = regexp.MustCompile(`^\{\s*(absolute|relative)\s*,\s*"?([^"}]+?)"?\s*\}$`)

// raiseMemoryAlarm records the broker's memory watermark, arranges for it
// to be restored whatever happens, sets it so low that the memory alarm
// goes off, and returns once the broker lists the alarm, with clear, which
// restores the watermark and returns once the alarm is gone.
func raiseMemoryAlarm(t *testing.T) (raisedAt time.Time, clear func() time.Time) {
	t.Helper()
	raw := strings.TrimSpace(rabbitmqctlOut(t, "eval", "vm_memory_monitor:get_vm_memory_high_watermark()."))
	restore := []string{"set_vm_memory_high_watermark"}
	switch m := watermarkRE.FindStringSubmatch(raw); {
	case m != nil && m[1] == "absolute":
		restore = append(restore, "absolute", strings.TrimSpace(m[2]))
	case m != nil:
		restore = append(restore, strings.TrimSpace(m[2]))
	default:
		if _, err := strconv.ParseFloat(raw, 64); err != nil {
			t.Fatalf("cannot read the memory watermark to restore it later: %q", raw)
		}
		restore = append(restore, raw)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "rabbitmqctl", restore...).CombinedOutput(); err != nil {
			t.Errorf("restore RabbitMQ's memory watermark BY HAND: rabbitmqctl %s: %v\n%s", strings.Join(restore, " "), err, out)
		}
	})
	t.Logf("memory watermark %s; raising the alarm (restored by: rabbitmqctl %s)", raw, strings.Join(restore, " "))
	rabbitmqctl(t, "set_vm_memory_high_watermark", "0.0000001")
	testenv.Eventually(t, 30*time.Second, func() bool { return memoryAlarmOn(t) }, "RabbitMQ never listed the memory alarm")
	raisedAt = time.Now()
	clear = func() time.Time {
		t.Helper()
		rabbitmqctl(t, restore...)
		at := time.Now()
		testenv.Eventually(t, 30*time.Second, func() bool { return !memoryAlarmOn(t) }, "RabbitMQ's memory alarm did not clear after the watermark was restored")
		return at
	}
	return raisedAt, clear
}

// memoryAlarmOn reports whether RabbitMQ lists a memory alarm.
func memoryAlarmOn(t *testing.T) bool {
	t.Helper()
	return strings.Contains(rabbitmqctlOut(t, "eval", "rabbit_alarm:get_alarms()."), "memory")
}

// rabbitmqctlOut runs rabbitmqctl and returns its standard output.
func rabbitmqctlOut(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "rabbitmqctl", args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("rabbitmqctl %v: %v\n%s%s", args, err, out, stderr.String())
	}
	return string(out)
}

// spent returns how many rows are dead and the highest attempt of any row.
func spent(t *testing.T, pool *pgxpool.Pool) (dead, attempt int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'dead'), coalesce(max(attempt), 0) FROM outbox`).Scan(&dead, &attempt); err != nil {
		t.Fatal(err)
	}
	return dead, attempt
}

// streamMsgs is how many messages the stream holds now.
func streamMsgs(t *testing.T, s jetstream.Stream) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	return info.State.Msgs
}

// metricSum adds up every series whose line starts with prefix (a metric
// name and the first of its labels).
func metricSum(text, prefix string) float64 {
	var sum float64
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			if i := strings.LastIndexByte(l, ' '); i > 0 {
				f, _ := strconv.ParseFloat(l[i+1:], 64)
				sum += f
			}
		}
	}
	return sum
}

// amqpDeliveries turns the messages read from a queue into deliveries of
// dest, in queue order.
func amqpDeliveries(dest string, msgs []amqp.Delivery) []Delivery {
	out := make([]Delivery, 0, len(msgs))
	for _, m := range msgs {
		key, _ := m.Headers["x-message-key"].(string)
		topic, _ := m.Headers["x-topic"].(string)
		out = append(out, Delivery{Dest: dest, ID: m.MessageId, Key: key, Topic: topic, N: payloadN(m.Body)})
	}
	return out
}
