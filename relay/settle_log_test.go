package relay

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
)

// oneRowDialect hands out one row, at attempt 4 of 5, then nothing, and
// records what the row was marked dead with.
type oneRowDialect struct {
	dialect.Dialect
	mu    sync.Mutex
	given bool
	dead  []dialect.DeadItem
}

func (d *oneRowDialect) Claim(context.Context, dialect.ClaimParams) ([]outbox.Message, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.given {
		return nil, nil
	}
	d.given = true
	return []outbox.Message{{ID: "00000000-0000-4000-8000-000000000001", Topic: "t", Payload: []byte(`{}`),
		Sequence: 1, Attempt: 4, MaxAttempts: 5}}, nil
}

func (d *oneRowDialect) Dead(_ context.Context, p dialect.DeadParams) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dead = append(d.dead, p.Items...)
	return int64(len(p.Items)), nil
}

func (d *oneRowDialect) ReleaseExpired(context.Context, dialect.ReleaseExpiredParams) (int64, error) {
	return 0, nil
}

func (d *oneRowDialect) deadItems() []dialect.DeadItem {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]dialect.DeadItem(nil), d.dead...)
}

type failDest struct{}

func (failDest) Publish(context.Context, []outbox.Message) error { return errors.New("broker said no") }
func (failDest) Close() error                                    { return nil }

// TestDeadLogSaysTheAttemptTheRowRecords: the log line of a row that dies
// names the attempt the row is marked dead with (the one that just failed,
// as `dead list` shows it), not the count before it: an operator reading
// "attempt=4 max_attempts=5" beside a row that says 5 would look for a
// fifth attempt that never happened.
func TestDeadLogSaysTheAttemptTheRowRecords(t *testing.T) {
	db := &oneRowDialect{}
	var logs testenv.LogBuffer
	e, err := New(db, oneRouter{}, map[string]destination.Destination{"d": failDest{}}, Options{
		BatchSize: 10, InflightBatches: 1, PollInterval: 10 * time.Millisecond, MaxPollInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = e.Run(ctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for len(db.deadItems()) == 0 {
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("the row never died; log:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if items := db.deadItems(); items[0].Attempt != 5 {
		t.Fatalf("row marked dead at attempt %d, want 5", items[0].Attempt)
	}
	var line string
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(l, "row dead: attempts exhausted") {
			line = l
		}
	}
	if !strings.Contains(line, " attempt=5 ") || !strings.Contains(line, " max_attempts=5 ") {
		t.Fatalf("dead log line %q, want attempt=5 max_attempts=5", line)
	}
}
