package relay

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
)

// recordingTracer gives each row a fresh header map with its own
// traceparent and records the outcome each end reports.
type recordingTracer struct {
	mu     sync.Mutex
	starts map[string]int
	ends   map[string][]error
}

func (r *recordingTracer) Start(_ context.Context, dest string, m *outbox.Message) func(error) {
	r.mu.Lock()
	r.starts[m.ID]++
	r.mu.Unlock()
	h := maps.Clone(m.Headers)
	if h == nil {
		h = map[string]string{}
	}
	h["traceparent"] = "span-of-" + m.ID + "-to-" + dest
	m.Headers = h
	id := m.ID
	return func(err error) {
		r.mu.Lock()
		r.ends[id] = append(r.ends[id], err)
		r.mu.Unlock()
	}
}

// headerRecorder records the traceparent each message carried and refuses
// the row "r1" for a reason of its own.
type headerRecorder struct {
	mu   sync.Mutex
	seen map[string]string
}

var errRefused = outbox.Permanent(errors.New("refused"))

func (h *headerRecorder) Publish(_ context.Context, msgs []outbox.Message) error {
	errs := make([]error, len(msgs))
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, m := range msgs {
		h.seen[m.ID] = m.Headers["traceparent"]
		if m.ID == "r1" {
			errs[i] = errRefused
		}
	}
	return destination.NewBatchError(errs)
}

func (h *headerRecorder) Close() error { return nil }

// TestTracerFollowsEachRow: the tracer sees every row once before its
// publish, the destination carries the headers the tracer gave the row,
// the claimed row's own header map is left as it was, and each end gets
// the row's outcome.
func TestTracerFollowsEachRow(t *testing.T) {
	t.Parallel()
	batch := rows("d", "r", 3)
	claimed := make([]map[string]string, len(batch))
	for i := range batch {
		batch[i].Headers = map[string]string{"traceparent": "from-the-row", "tenant": "acme"}
		claimed[i] = batch[i].Headers
	}
	db := &fakeDialect{batches: [][]outbox.Message{batch}}
	tr := &recordingTracer{starts: map[string]int{}, ends: map[string][]error{}}
	dest := &headerRecorder{seen: map[string]string{}}
	e := newTestEngine(t, db, map[string]destination.Destination{"d": dest}, Options{
		Lease: 10 * time.Second, PollInterval: 20 * time.Millisecond, Tracer: tr,
	})
	stop := runEngine(t, e)
	testenv.Eventually(t, 10*time.Second, func() bool {
		s := db.state()
		return len(s.completed)+len(s.dead) == len(batch)
	}, "rows not settled")
	stop()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for i, m := range batch {
		if n := tr.starts[m.ID]; n != 1 {
			t.Errorf("row %s: Start called %d times, want 1", m.ID, n)
		}
		ends := tr.ends[m.ID]
		if len(ends) != 1 {
			t.Fatalf("row %s: end called %d times, want 1", m.ID, len(ends))
		}
		if want := m.ID == "r1"; (ends[0] != nil) != want || (want && !errors.Is(ends[0], errRefused)) {
			t.Errorf("row %s: end(%v), want the row's outcome", m.ID, ends[0])
		}
		if got, want := dest.seen[m.ID], "span-of-"+m.ID+"-to-d"; got != want {
			t.Errorf("row %s: the destination got traceparent %q, want the tracer's %q", m.ID, got, want)
		}
		if claimed[i]["traceparent"] != "from-the-row" || len(claimed[i]) != 2 {
			t.Errorf("row %s: the claimed row's headers changed to %v", m.ID, claimed[i])
		}
	}
}

// BenchmarkEngineTracer measures the engine's allocations per row
// delivered, claim to settle, without a Tracer (off: the publish path
// only checks for nil) and with one that gives each row a header map.
func BenchmarkEngineTracer(b *testing.B) {
	for _, bc := range []struct {
		name   string
		tracer Tracer
	}{{"off", nil}, {"headers", cloneTracer{}}} {
		b.Run(bc.name, func(b *testing.B) {
			benchmarkEngine(b, bc.tracer)
		})
	}
}

// cloneTracer gives each row a header map of its own with a traceparent.
type cloneTracer struct{}

func (cloneTracer) Start(_ context.Context, _ string, m *outbox.Message) func(error) {
	h := make(map[string]string, len(m.Headers)+1)
	maps.Copy(h, m.Headers)
	h["traceparent"] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	m.Headers = h
	return func(error) {}
}

func benchmarkEngine(b *testing.B, tracer Tracer) {
	const batch = 100
	var mu sync.Mutex
	left := b.N
	db := &fakeDialect{claimFn: func(p dialect.ClaimParams) ([]outbox.Message, error) {
		mu.Lock()
		defer mu.Unlock()
		n := min(left, p.Limit)
		left -= n
		return rows("d", "r", n), nil
	}}
	e, err := New(db, byTopic{}, map[string]destination.Destination{"d": acceptAll{}}, Options{
		BatchSize: batch, Lease: 10 * time.Second, PollInterval: time.Millisecond, MaxPollInterval: time.Millisecond, Tracer: tracer,
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.ReportAllocs()
	b.ResetTimer()
	go func() { defer close(done); _ = e.Run(ctx) }()
	for {
		db.mu.Lock()
		n := len(db.completed)
		db.mu.Unlock()
		if n >= b.N {
			break
		}
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	cancel()
	<-done
}
