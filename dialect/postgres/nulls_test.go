package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/dialect/postgres"
	"github.com/queuebox/queuebox/internal/testenv"
)

// TestClaimedRowWithNullsIsMalformedNotAFailedClaim: an adopted table may
// allow NULL where the bundled one does not. A claimed row whose topic or
// counters are NULL must come back Malformed (the engine dead-letters it
// with the reason); failing the whole claim would leave the batch
// processing until its lease expires, again and again.
func TestClaimedRowWithNullsIsMalformedNotAFailedClaim(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The bundled table, with its NOT NULL constraints dropped.
	for _, col := range []string{"topic", "attempt", "max_attempts", "created_at"} {
		if _, err := pg.Pool.Exec(ctx, `ALTER TABLE outbox ALTER COLUMN `+col+` DROP NOT NULL`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pg.Pool.Exec(ctx, `INSERT INTO outbox (topic, key, payload, attempt, max_attempts, created_at)
		VALUES (NULL, 'k1', '{}', NULL, NULL, NULL), ('ok.topic', 'k2', '{}', 0, 5, now())`); err != nil {
		t.Fatal(err)
	}
	d, err := postgres.New(pg.Pool, dialect.DefaultMapping())
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: "00000000-0000-0000-0000-0000000000aa", Limit: 10, Lease: time.Minute})
	if err != nil {
		t.Fatalf("claim failed on a row with NULLs: %v", err)
	}
	if len(msgs) != 2 {
		t.Fatalf("claimed %d rows, want 2", len(msgs))
	}
	for _, m := range msgs {
		switch m.Key {
		case "k1":
			if m.Malformed == nil {
				t.Fatalf("row with a NULL topic is not Malformed: %+v", m)
			}
		case "k2":
			if m.Malformed != nil || m.Topic != "ok.topic" || m.MaxAttempts != 5 {
				t.Fatalf("healthy row: %+v", m)
			}
		}
	}
}

// TestClaimScansAdoptedColumnTypes: adopted tables store the counters and
// times in other types than the bundled table (smallint, timestamp without
// time zone, date). The claim reads each of them, NULL or not, the way pgx
// reads them into *int64 and *time.Time: timestamps without a zone as UTC,
// dates at midnight UTC.
func TestClaimScansAdoptedColumnTypes(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, ddl := range []string{
		`ALTER TABLE outbox ALTER COLUMN attempt TYPE smallint`,
		`ALTER TABLE outbox ALTER COLUMN max_attempts DROP NOT NULL`,
		`ALTER TABLE outbox ALTER COLUMN aggregate_type TYPE text`,
		`ALTER TABLE outbox ALTER COLUMN created_at DROP DEFAULT`,
		`ALTER TABLE outbox ALTER COLUMN created_at DROP NOT NULL`,
		`ALTER TABLE outbox ALTER COLUMN created_at TYPE timestamp without time zone USING created_at AT TIME ZONE 'UTC'`,
		`ALTER TABLE outbox ALTER COLUMN scheduled_at DROP DEFAULT`,
		`ALTER TABLE outbox ALTER COLUMN scheduled_at TYPE date USING scheduled_at::date`,
	} {
		if _, err := pg.Pool.Exec(ctx, ddl); err != nil {
			t.Fatalf("%s: %v", ddl, err)
		}
	}
	if _, err := pg.Pool.Exec(ctx, `INSERT INTO outbox (topic, key, payload, attempt, max_attempts, aggregate_type, created_at, scheduled_at, sequence)
		VALUES ('t.full', 'k1', '{}', 3, 7, 'order', '2026-01-02 03:04:05.678901', '2026-01-02', 1),
		       ('t.nulls', 'k2', '{}', 0, NULL, NULL, NULL, '2026-01-03', 2)`); err != nil {
		t.Fatal(err)
	}
	d, err := postgres.New(pg.Pool, dialect.DefaultMapping())
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: "00000000-0000-0000-0000-0000000000ab", Limit: 10, Lease: time.Minute})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if len(msgs) != 2 {
		t.Fatalf("claimed %d rows, want 2", len(msgs))
	}
	full, nulls := msgs[0], msgs[1]
	wantCreated := time.Date(2026, 1, 2, 3, 4, 5, 678901000, time.UTC)
	if full.Malformed != nil || full.Topic != "t.full" || full.Key != "k1" || full.Attempt != 3 ||
		full.MaxAttempts != 7 || full.AggregateType != "order" || !full.CreatedAt.Equal(wantCreated) ||
		!full.ScheduledAt.Equal(time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("row with every column set: %+v", full)
	}
	if nulls.Malformed != nil || nulls.Topic != "t.nulls" || nulls.MaxAttempts != 0 || nulls.AggregateType != "" ||
		!nulls.CreatedAt.IsZero() || !nulls.ScheduledAt.Equal(time.Date(2026, 1, 3, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("row with NULLs: %+v", nulls)
	}
}
