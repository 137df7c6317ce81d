package relay

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testenv"
)

// TestClaimFailuresLogOncePerSpell: through an outage the failed claims log
// their first failure at once, then one line per failLogEvery with the
// count, and the first claim that works logs the end of the spell; a
// later outage starts again with a line of its own.
func TestClaimFailuresLogOncePerSpell(t *testing.T) {
	var logs testenv.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	f := &claimFailures{now: func() time.Time { return now }}
	lines := func() []string {
		out := strings.Split(strings.TrimSpace(logs.String()), "\n")
		if out[0] == "" {
			return nil
		}
		return out
	}
	down := errors.New("connection refused")

	f.ok(log)      // nothing failing: nothing to say
	for range 50 { // ten a second for five seconds
		f.failed(log, down, 100*time.Millisecond)
		now = now.Add(100 * time.Millisecond)
	}
	if l := lines(); len(l) != 1 || !strings.Contains(l[0], `msg="claim failed; retrying"`) || !strings.Contains(l[0], "connection refused") {
		t.Fatalf("after 50 failures in 5 s, want one line naming the error, got %q", l)
	}
	now = now.Add(failLogEvery)
	f.failed(log, down, time.Second)
	if l := lines(); len(l) != 2 || !strings.Contains(l[1], "claims still failing") || !strings.Contains(l[1], "failed_claims=50") {
		t.Fatalf("a failure %v after the first line: want a line with the 50 failures since, got %q", failLogEvery, l)
	}
	f.failed(log, down, time.Second)
	f.ok(log)
	f.ok(log)
	if l := lines(); len(l) != 3 || !strings.Contains(l[2], "claims work again") || !strings.Contains(l[2], "failed_claims=52") {
		t.Fatalf("the end of the spell: want one line with the 52 failures, got %q", l)
	}
	f.failed(log, down, time.Second)
	if l := lines(); len(l) != 4 || !strings.Contains(l[3], `msg="claim failed; retrying"`) {
		t.Fatalf("a new outage: want its own first line, got %q", l)
	}
}
