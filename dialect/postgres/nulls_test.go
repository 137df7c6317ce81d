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
