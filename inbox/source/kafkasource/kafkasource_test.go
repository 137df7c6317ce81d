package kafkasource_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/inbox/intake"
	"github.com/queuebox/queuebox/inbox/source"
	"github.com/queuebox/queuebox/inbox/source/kafkasource"
	"github.com/queuebox/queuebox/internal/testenv"
)

// TestKafkaSource produces with franz-go to a kfake cluster: a record with
// X-Message-Id sent twice, one without (named by topic, partition and
// offset) and one that is not JSON. Two rows are stored, keyed by the
// record key, and the group's committed offset passes all four.
func TestKafkaSource(t *testing.T) {
	topic := testenv.KafkaTopicName(t, "inbox")
	k := testenv.Kafka(t, []testenv.KafkaTopic{{Name: topic, Partitions: 1}})
	pg := testenv.InboxPostgres(t)
	ctx := testenv.Context(t, time.Minute)
	table, err := inbox.NewTable(pg.Pool, inbox.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	rec := func(key, id, body string) *kgo.Record {
		r := &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(body), Headers: []kgo.RecordHeader{{Key: "X-Kind", Value: []byte("created")}}}
		if id != "" {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "X-Message-Id", Value: []byte(id)})
		}
		return r
	}
	if err := prod.ProduceSync(ctx, rec("c-1", "m-1", `{"n":1}`), rec("c-1", "m-1", `{"n":1}`), rec("c-2", "", `{"n":2}`), rec("c-3", "m-3", `nope`)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	idem, _ := intake.NewField("X-Request-Id", "")
	tp, _ := intake.ParseTopic("{{ topic }}.{{ header.X-Kind }}")
	sink := &source.Sink{Store: table, Rules: intake.Rules{Source: "kafka", IdempotencyKey: idem, Topic: tp, Headers: intake.NewHeaderPolicy()}, Pull: true}
	src, err := kafkasource.New(sink, kafkasource.Options{Brokers: k.Brokers, Topics: []string{topic}, Group: "inbox", Headers: sink.Rules.Headers, RecordKeyOrders: true})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = src.Run(rctx) }()
	testenv.Eventually(t, 20*time.Second, func() bool {
		var n int
		_ = pg.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE source = 'kafka'`).Scan(&n)
		return n == 2
	}, "the source did not store the records")
	stop()
	<-done
	var keys, ids []string
	rows, _ := pg.Pool.Query(ctx, `SELECT key, idempotency_key, topic FROM inbox ORDER BY sequence`)
	for rows.Next() {
		var key, id, tp string
		_ = rows.Scan(&key, &id, &tp)
		keys, ids = append(keys, key), append(ids, id)
		if tp != topic+".created" {
			t.Errorf("topic %q, want %s.created", tp, topic)
		}
	}
	if len(keys) != 2 || keys[0] != "c-1" || ids[0] != "m-1" || keys[1] != "c-2" || ids[1] != topic+"/0/2" {
		t.Errorf("rows: keys %v ids %v", keys, ids)
	}
	// A new member of the group starts past every record: all four were committed.
	probe, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumerGroup("inbox"), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if fs := probe.PollFetches(pctx); fs.NumRecords() != 0 {
		t.Errorf("%d records not committed", fs.NumRecords())
	}
}
