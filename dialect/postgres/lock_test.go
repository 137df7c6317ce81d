package postgres

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/dialect/dialecttest"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
)

// TestLockModeConformance runs lock mode on the bundled table.
func TestLockModeConformance(t *testing.T) {
	dialecttest.RunLockMode(t, func(t *testing.T) dialecttest.Harness {
		pg := testenv.Postgres(t)
		d, err := NewLockMode(pg.Pool, dialect.DefaultMapping(), 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Close)
		return &lockHarness{harness{pool: pg.Pool, d: d.Dialect}, d}
	})
}

type lockHarness struct {
	harness
	lock *LockDialect
}

func (h *lockHarness) Dialect() dialect.Dialect { return h.lock }

// TestRenderAbsentColumns: every query renders for a table with only the
// required columns, in both modes, and names no absent column.
func TestRenderAbsentColumns(t *testing.T) {
	m, err := dialect.NewMapping("events", map[string]string{
		"id": "event_id", "topic": "evt_type", "payload": "body", "state": "status", "sequence": "event_id",
	}, map[string]string{"processing": "", "sent": "DONE", "dead": "ERROR", "pending": "NEW"})
	if err != nil {
		t.Fatalf("a BIGSERIAL id serving as the sequence was refused: %v", err)
	}
	m, err = dialect.NewMapping("events", map[string]string{
		"id": "event_id", "topic": "evt_type", "payload": "body", "state": "status", "sequence": "seq",
		"key": "", "headers": "", "aggregateType": "", "attempt": "", "maxAttempts": "", "scheduledAt": "",
		"createdAt": "", "updatedAt": "", "lastError": "", "claimToken": "", "claimedAt": "", "leaseExpiresAt": "", "heldAt": "",
	}, map[string]string{"processing": "", "sent": "DONE", "dead": "ERROR", "pending": "NEW"})
	if err != nil {
		t.Fatal(err)
	}
	q, err := Render(m, WithIDType("bigint"), func(o *options) { o.lock = true })
	if err != nil {
		t.Fatal(err)
	}
	lq, err := RenderLock(m, WithIDType("bigint"))
	if err != nil {
		t.Fatal(err)
	}
	for name, sql := range lq {
		q["lock/"+name] = sql
	}
	// Render gives the unbounded claim; the windowed one has its own
	// template (claim_window.tmpl).
	shapes, err := newClaimShapes(lockFiles, "sql/lock/claim.sql", m, newOptions([]Option{WithIDType("bigint")}))
	if err != nil {
		t.Fatal(err)
	}
	if q["lock/claim#window"], err = shapes.sql(claimShape{limit: 100, window: 1000}); err != nil {
		t.Fatal(err)
	}
	for name, sql := range q {
		for _, absent := range []string{`"scheduled_at"`, `"attempt"`, `"last_error"`, `"updated_at"`, `"claim_token"`, `"key"`, `'processing'`} {
			if strings.Contains(sql, absent) {
				t.Errorf("%s names %s", name, absent)
			}
		}
	}
	if want := "unnest($1::text[]::bigint[])"; !strings.Contains(lq["complete"], want) {
		t.Errorf("lock complete does not cast ids with %s:\n%s", want, lq["complete"])
	}
}

// TestLockIdleWindowClaimWaitsForALockedFront: in lock mode, the engine's
// unbounded claim after an empty window (IdleWindow) takes nothing while
// another batch holds the first due row locked: that batch explains the
// empty window, and walking the backlog behind it found only heads far
// back, for a second or more at 100,000 rows (docs/performance.md, Open).
// When the first due row is free but not a head (its key waits for a retry
// that is not due), the claim walks the backlog as before.
func TestLockIdleWindowClaimWaitsForALockedFront(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := testenv.Context(t, 30*time.Second)
	d, err := NewLockMode(pg.Pool, dialect.DefaultMapping(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	const window = 10
	// Twelve rows of one key at the front, then one row of another key.
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, key, payload) SELECT 'lock.front', 'f', '{}' FROM generate_series(1, 12)`)
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, key, payload) VALUES ('lock.back', 'b', '{}')`)
	claim := func(limit, window, idleWindow int) (string, []outbox.Message) {
		t.Helper()
		token := uuid.NewString()
		msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: token, Limit: limit, Lease: time.Hour, Window: window, IdleWindow: idleWindow})
		if err != nil {
			t.Fatal(err)
		}
		return token, msgs
	}
	commit := func(token string) {
		t.Helper()
		if err := d.Commit(ctx, token); err != nil {
			t.Fatal(err)
		}
	}

	a, first := claim(1, window, 0)
	if len(first) != 1 || first[0].Topic != "lock.front" {
		t.Fatalf("first claim: %v; want the first front row", first)
	}
	if _, got := claim(5, window, 0); len(got) != 0 {
		t.Fatalf("windowed claim beside the locked head took %d rows, want 0", len(got))
	}
	if _, got := claim(5, 0, window); len(got) != 0 {
		t.Fatalf("idle claim took %d rows while another batch held the first due row, want 0", len(got))
	}
	// Without IdleWindow the unbounded claim walks on to the head far back.
	b, got := claim(5, 0, 0)
	if len(got) != 1 || got[0].Topic != "lock.back" {
		t.Fatalf("unbounded claim: %v; want the back row", got)
	}
	commit(b) // nothing settled: the back row stays pending
	commit(a)

	// The front key's first row waits for a retry: the first due row is
	// free, and no head; the idle claim walks to the back row.
	pg.MustExec(t, ctx, `UPDATE outbox SET scheduled_at = now() + interval '1 hour' WHERE id = $1`, first[0].ID)
	c, got := claim(5, 0, window)
	if len(got) != 1 || got[0].Topic != "lock.back" {
		t.Fatalf("idle claim beside a free first due row that is no head: %v; want the back row", got)
	}
	commit(c)
}
