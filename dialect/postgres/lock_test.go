package postgres

import (
	"strings"
	"testing"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/dialect/dialecttest"
	"github.com/queuebox/queuebox/internal/testenv"
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
	_, err := dialect.NewMapping("events", map[string]string{
		"id": "event_id", "topic": "evt_type", "payload": "body", "state": "status", "sequence": "event_id",
	}, map[string]string{"processing": "", "sent": "DONE", "dead": "ERROR", "pending": "NEW"})
	if err != nil {
		t.Fatalf("a BIGSERIAL id serving as the sequence was refused: %v", err)
	}
	m, err := dialect.NewMapping("events", map[string]string{
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
	shapes, err := newClaimShapes(lockFiles, "sql/lock/claim.sql", "$1", m, newOptions([]Option{WithIDType("bigint")}))
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
