package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/cmd/queuebox/bench"
	"github.com/queuebox/queuebox/internal/testenv"
)

// TestBenchProgressCountsSteps: the bench's progress counts the steps its
// lines announce against those its options plan, a skipped drain case
// takes its rounds off the total, and the bench's own lines pass through
// unchanged.
func TestBenchProgressCountsSteps(t *testing.T) {
	t.Parallel()
	o := bench.Defaults()
	o.Cases, o.Runs = []string{"nats", "http-unkeyed", "latency"}, 2
	if got := benchSteps(o); got != 3*2+2 {
		t.Fatalf("benchSteps = %d, want 8 (3 drain cases of 2 rounds, 2 latency runs)", got)
	}
	var out strings.Builder
	b := newBenchProgress(&globalFlags{progressEvery: time.Hour}, &out, o)
	lines := "== nats-keyed: 100 rows, batch 100, round 1 of 2\n   bare loop 1000 rows/s\n== nats-keyed: 100 rows, batch 100, round 2 of 2\n" +
		"== http-unkeyed skipped: connection refused\n== latency: 2000 rows/s for 10s, wake on commit false\n"
	for _, chunk := range []string{lines[:10], lines[10:50], lines[50:]} { // lines arrive in pieces
		if _, err := b.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	if b.done != 3 || b.total != 6 {
		t.Errorf("done %d of %d, want 3 of 6 (http-unkeyed's 2 rounds skipped)", b.done, b.total)
	}
	b.Finish()
	if out.String() != lines {
		t.Errorf("the bench's lines came out as\n%q\nwant\n%q", out.String(), lines)
	}
}

// TestProgressPlainLines: away from a terminal, progress writes a line
// with the count, the share, the rate and the time left every interval,
// and a last one with the whole count when it ends; with --no-progress,
// nothing.
func TestProgressPlainLines(t *testing.T) {
	t.Parallel()
	var out testenv.LogBuffer
	p := newProgress(&globalFlags{progressEvery: time.Millisecond}, &out, "replay", "rows", -1)
	p.Set(250, 1000)
	testenv.Eventually(t, 5*time.Second, func() bool { return strings.Contains(out.String(), "replay: 250/1000 rows (25%), ") }, "no progress line:\n%s", out.String())
	if !regexp.MustCompile(`replay: 250/1000 rows \(25%\), \d+ rows/s, (\d+[hms])+ left\n`).MatchString(out.String()) {
		t.Errorf("progress line without the rate and the time left:\n%s", out.String())
	}
	p.Set(1000, 1000)
	p.Finish()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "replay: 1000/1000 rows (100%), ") || !strings.Contains(last, "done in") {
		t.Errorf("last line %q, want the whole count", last)
	}
	var quiet testenv.LogBuffer
	q := newProgress(&globalFlags{noProgress: true, progressEvery: time.Millisecond}, &quiet, "replay", "rows", 10)
	q.Set(5, 10)
	q.Finish()
	if quiet.String() != "" {
		t.Errorf("--no-progress wrote %q", quiet.String())
	}
}
