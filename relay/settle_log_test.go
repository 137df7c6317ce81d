package relay

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
)

type failDest struct{}

func (failDest) Publish(context.Context, []outbox.Message) error { return errors.New("broker said no") }
func (failDest) Close() error                                    { return nil }

// TestDeadLogSaysTheAttemptTheRowRecords: the log line of a row that dies
// names the attempt the row is marked dead with (the one that just failed,
// as `dead list` shows it), not the count before it: an operator reading
// "attempt=4 max_attempts=5" beside a row that says 5 would look for a
// fifth attempt that never happened.
func TestDeadLogSaysTheAttemptTheRowRecords(t *testing.T) {
	t.Parallel()
	db := &fakeDialect{batches: [][]outbox.Message{{{ID: "00000000-0000-4000-8000-000000000001", Topic: "d",
		Payload: []byte(`{}`), Sequence: 1, Attempt: 4, MaxAttempts: 5}}}}
	var logs testenv.LogBuffer
	e := newTestEngine(t, db, map[string]destination.Destination{"d": failDest{}}, Options{
		BatchSize: 10, PollInterval: 10 * time.Millisecond, MaxPollInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	stop := runEngine(t, e)
	testenv.Eventually(t, 10*time.Second, func() bool { return len(db.state().dead) > 0 }, "the row never died")
	stop()
	if items := db.state().dead; items[0].Attempt != 5 {
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
