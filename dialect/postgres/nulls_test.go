package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/dialect/postgres"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
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
		pg.MustExec(t, ctx, `ALTER TABLE outbox ALTER COLUMN `+col+` DROP NOT NULL`)
	}
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, key, payload, attempt, max_attempts, created_at)
		VALUES (NULL, 'k1', '{}', NULL, NULL, NULL), ('ok.topic', 'k2', '{}', 0, 5, now())`)
	msgs := claimAll(t, ctx, pg.Pool, 2)
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

// TestClaimScansOtherTimeAndCounterTypes: the claim reads every value the
// way pgx reads it into *int64 and *time.Time — smallint counters,
// timestamps without a zone as UTC, dates at midnight UTC, NULLs — except
// the infinities, which time.Time cannot hold: they read as the zero time
// and the row is delivered (they used to fail the whole claim, again at
// every claim, after its UPDATE had committed). The schema check of
// `queuebox run` admits only timestamptz times and int2/int4/int8
// counters; the scan is wider so that it never is the narrower of the two.
func TestClaimScansOtherTimeAndCounterTypes(t *testing.T) {
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
		       ('t.nulls', 'k2', '{}', 0, NULL, NULL, NULL, '2026-01-03', 2),
		       ('t.infinite', 'k3', '{}', 0, 5, NULL, 'infinity', '-infinity', 3)`); err != nil {
		t.Fatal(err)
	}
	msgs := claimAll(t, ctx, pg.Pool, 3)
	full, nulls, infinite := msgs[0], msgs[1], msgs[2]
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
	if infinite.Malformed != nil || infinite.Topic != "t.infinite" || !infinite.CreatedAt.IsZero() || !infinite.ScheduledAt.IsZero() {
		t.Fatalf("row with infinite times: %+v", infinite)
	}
}

// claimAll claims every ready row of the bundled table (up to 10) and
// fails unless there are want of them.
func claimAll(t *testing.T, ctx context.Context, pool *pgxpool.Pool, want int) []outbox.Message {
	t.Helper()
	d, err := postgres.New(pool, dialect.DefaultMapping())
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: "00000000-0000-0000-0000-0000000000aa", Limit: 10, Lease: time.Minute})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if len(msgs) != want {
		t.Fatalf("claimed %d rows, want %d", len(msgs), want)
	}
	return msgs
}

// TestNullSequenceIsMalformedAndNoted: a row whose sequence is NULL has no
// place in per-key order. A claim that reaches it (the unbounded one: the
// window is counted in sequence numbers) returns it Malformed, to be
// dead-lettered with the reason, instead of failing the whole claim after
// its UPDATE committed; and the table check notes the nullable column with
// the DDL that rules such rows out.
func TestNullSequenceIsMalformedAndNoted(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pg.MustExec(t, ctx, `ALTER TABLE outbox ALTER COLUMN sequence DROP NOT NULL`)
	if notes := checkNotes(t, ctx, pg.Pool); !hasNote(notes, "sequence", "allows NULL", `ALTER COLUMN "sequence" SET NOT NULL`) {
		t.Fatalf("notes %q: want a note on the nullable sequence", notes)
	}
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, key, payload, sequence)
		VALUES ('t.ok', 'k1', '{}', 1), ('t.noseq', 'k2', '{}', NULL)`)
	msgs := claimAll(t, ctx, pg.Pool, 2)
	for _, m := range msgs {
		switch m.Topic {
		case "t.ok":
			if m.Malformed != nil || m.Sequence != 1 {
				t.Fatalf("healthy row: %+v", m)
			}
		case "t.noseq":
			if m.Malformed == nil || !strings.Contains(m.Malformed.Error(), "sequence is NULL") {
				t.Fatalf("row without a sequence: %+v, want Malformed naming the sequence", m)
			}
		}
	}
}

// TestIDWithoutUniqueIndexIsNoted: the claim reaches rows by id, every later
// write is fenced on id, and JetStream deduplicates on it, so rows that
// share an id would be claimed, settled and deduplicated as one message.
// The table check notes an id column that no unique index covers, with the
// DDL, and refuses nothing; with the primary key it is silent.
func TestIDWithoutUniqueIndexIsNoted(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	notedUnique := func() bool {
		t.Helper()
		plan := resolve(t, ctx, pg.Pool)
		noted := hasNote(plan.Warnings, "no unique index", `ADD PRIMARY KEY ("id")`)
		if noted == plan.IDUnique {
			t.Errorf("IDUnique %v, but noted %v", plan.IDUnique, noted)
		}
		return noted
	}
	if notedUnique() {
		t.Fatal("the bundled table (primary key on id) was noted")
	}
	pg.MustExec(t, ctx, `ALTER TABLE outbox DROP CONSTRAINT outbox_pkey`)
	// A unique index that is partial, or over more than the id, does not
	// make the id unique.
	pg.MustExec(t, ctx, `CREATE UNIQUE INDEX outbox_id_partial ON outbox (id) WHERE state = 'pending'`)
	pg.MustExec(t, ctx, `CREATE UNIQUE INDEX outbox_id_topic ON outbox (id, topic)`)
	if !notedUnique() {
		t.Fatal("an id column without a unique index was not noted")
	}
	pg.MustExec(t, ctx, `CREATE UNIQUE INDEX outbox_id_unique ON outbox (id)`)
	if notedUnique() {
		t.Fatal("an id column with a unique index was noted")
	}
	// An index that an interrupted CREATE INDEX CONCURRENTLY left invalid
	// enforces nothing.
	pg.MustExec(t, ctx, `UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'outbox_id_unique'::regclass`)
	if !notedUnique() {
		t.Fatal("an id column whose only unique index is invalid was not noted")
	}
	pg.MustExec(t, ctx, `DROP INDEX outbox_id_unique`)
	// Unique under another equality than the claim's join on id: a
	// case-insensitive column whose only unique index compares bytes.
	pg.MustExec(t, ctx, `CREATE COLLATION IF NOT EXISTS qb_test_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`)
	pg.MustExec(t, ctx, `ALTER TABLE outbox ALTER COLUMN id DROP DEFAULT, ALTER COLUMN id TYPE text COLLATE qb_test_ci`)
	pg.MustExec(t, ctx, `DROP INDEX outbox_id_partial, outbox_id_topic`)
	pg.MustExec(t, ctx, `CREATE UNIQUE INDEX outbox_id_bytes ON outbox (id COLLATE "C")`)
	if !notedUnique() {
		t.Fatal("an id unique only under another collation than the column's was not noted")
	}
	pg.MustExec(t, ctx, `CREATE UNIQUE INDEX outbox_id_ci ON outbox (id)`)
	if notedUnique() {
		t.Fatal("an id with a unique index under the column's own collation was noted")
	}
}

// TestNonUniqueIDClaimRepeatsTheHeadOfKeyProbe: on a table whose id is not
// unique, the claim's UPDATE reaches by id rows its locking scan never
// tested. Two rows of one key that share an id: the scan takes the head,
// and only the UPDATE's own head-of-key probe keeps the second row out.
// The claim rendered for a unique id (WithUniqueID, what `queuebox run`
// uses when the table has a unique index on the id) takes both: the case
// the guard is for.
func TestNonUniqueIDClaimRepeatsTheHeadOfKeyProbe(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pg.MustExec(t, ctx, `ALTER TABLE outbox DROP CONSTRAINT outbox_pkey`)
	pg.MustExec(t, ctx, `INSERT INTO outbox (id, topic, key, payload)
		SELECT '6f1c1a5e-0000-4000-8000-0000000000aa', 't', 'k', '{}' FROM generate_series(1, 2)`)
	if resolve(t, ctx, pg.Pool).IDUnique {
		t.Fatal("an id without a unique index was taken for unique")
	}
	claimed := func(unique bool) int {
		t.Helper()
		d, err := postgres.New(pg.Pool, dialect.DefaultMapping(), postgres.WithUniqueID(unique))
		if err != nil {
			t.Fatal(err)
		}
		// Claim through the dialect, then undo it: both claims start
		// from the same two pending rows.
		msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: "6f1c1a5e-0000-4000-8000-000000000001", Limit: 10, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		pg.MustExec(t, ctx, `UPDATE outbox SET state = 'pending', claim_token = NULL, claimed_at = NULL, lease_expires_at = NULL`)
		return len(msgs)
	}
	if n := claimed(false); n != 1 {
		t.Errorf("guarded claim took %d rows of one key, want the head only", n)
	}
	if n := claimed(true); n != 2 {
		t.Errorf("the claim without the repeated probe took %d rows; want 2, or this test no longer shows what the guard is for", n)
	}
}

// resolve runs the table check on the bundled table.
func resolve(t *testing.T, ctx context.Context, pool *pgxpool.Pool) postgres.TablePlan {
	t.Helper()
	plan, err := postgres.ResolveTable(ctx, pool, dialect.DefaultMapping(), postgres.ModeAuto, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Problems) != 0 {
		t.Fatalf("problems %v, want none", plan.Problems)
	}
	return plan
}

// TestAutovacuumOffIsNoted: every claim steps over the index entries of rows
// claimed since the table's last vacuum, so without autovacuum claims slow
// down for as long as the relay runs (docs/operations.md, "Vacuum"). The
// table check notes a table whose autovacuum is off, by the table's option
// or the server's setting, and refuses nothing.
func TestAutovacuumOffIsNoted(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	noted := func(what string) bool {
		t.Helper()
		return hasNote(resolve(t, ctx, pg.Pool).Warnings, "autovacuum is off", what)
	}
	var serverOn bool
	if err := pg.Pool.QueryRow(ctx, `SELECT current_setting('autovacuum')::boolean`).Scan(&serverOn); err != nil {
		t.Fatal(err)
	}
	// The server's setting is the machine's (CI's PostgreSQL runs without
	// autovacuum): the note follows it either way.
	if got := noted("autovacuum = off"); got == serverOn {
		t.Fatalf("server autovacuum %v, noted %v", serverOn, got)
	}
	if noted("autovacuum_enabled") {
		t.Fatal("the table's option was noted before it was set")
	}
	pg.MustExec(t, ctx, `ALTER TABLE outbox SET (autovacuum_enabled = false)`)
	if !noted("ALTER TABLE \"outbox\" RESET (autovacuum_enabled)") {
		t.Fatal("a table with autovacuum_enabled = false was not noted")
	}
}

// checkNotes runs the table check on the bundled table and returns its
// notes; a problem fails the test (these checks note, they never refuse).
func checkNotes(t *testing.T, ctx context.Context, pool *pgxpool.Pool) []string {
	t.Helper()
	return resolve(t, ctx, pool).Notes
}

// hasNote reports whether one of notes contains every one of parts.
func hasNote(notes []string, parts ...string) bool {
	for _, n := range notes {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(n, p)
		}
		if all {
			return true
		}
	}
	return false
}

// TestShortLastErrorColumnTakesCutErrors: an adopted table whose lastError
// column is a VARCHAR(n) shorter than the relay's error texts (up to 1,024
// characters). The table check reports its length, and the retry and dead
// statements cut their texts to it: before, PostgreSQL refused them (22001,
// value too long), the rows were never settled, and they went round again
// at every lease expiry (lock mode: at once) without spending an attempt.
func TestShortLastErrorColumnTakesCutErrors(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pg.MustExec(t, ctx, `ALTER TABLE outbox ALTER COLUMN last_error TYPE VARCHAR(40)`)
	plan := resolve(t, ctx, pg.Pool)
	if plan.LastErrorLen != 40 {
		t.Fatalf("LastErrorLen = %d, want 40", plan.LastErrorLen)
	}
	if !hasNote(plan.Notes, "last_error", "at most 40 characters") {
		t.Errorf("no note on the short last_error column: %v", plan.Notes)
	}
	long := strings.Repeat("é", 300) // characters, not bytes, are what VARCHAR(n) counts
	for _, mode := range []string{postgres.ModeLease, postgres.ModeLock} {
		t.Run(mode, func(t *testing.T) {
			pg.MustExec(t, ctx, `TRUNCATE outbox`)
			pg.MustExec(t, ctx, `INSERT INTO outbox (topic, payload) SELECT 't', '{}' FROM generate_series(1, 2)`)
			opt := postgres.WithLastErrorLength(plan.LastErrorLen)
			var d dialect.Dialect
			var err error
			if mode == postgres.ModeLock {
				d, err = postgres.NewLockMode(pg.Pool, dialect.DefaultMapping(), time.Minute, opt)
			} else {
				d, err = postgres.New(pg.Pool, dialect.DefaultMapping(), opt)
			}
			if err != nil {
				t.Fatal(err)
			}
			token := "6f1c1a5e-0000-4000-8000-0000000000bb"
			msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: token, Limit: 10, Lease: time.Minute})
			if err != nil || len(msgs) != 2 {
				t.Fatalf("Claim = %d rows, %v; want 2", len(msgs), err)
			}
			n, err := d.Retry(ctx, dialect.RetryParams{Token: token, Items: []dialect.RetryItem{{ID: msgs[0].ID, Attempt: 1, Delay: time.Minute, Error: long}}})
			if err != nil || n != 1 {
				t.Fatalf("Retry with a %d-character error = %d, %v; want 1 row", len([]rune(long)), n, err)
			}
			n, err = d.Dead(ctx, dialect.DeadParams{Token: token, Items: []dialect.DeadItem{{ID: msgs[1].ID, Attempt: 1, Error: long}}})
			if err != nil || n != 1 {
				t.Fatalf("Dead with a %d-character error = %d, %v; want 1 row", len([]rune(long)), n, err)
			}
			if c, ok := d.(dialect.BatchCommitter); ok {
				if err := c.Commit(ctx, token); err != nil {
					t.Fatal(err)
				}
			}
			var states, lens string
			if err := pg.Pool.QueryRow(ctx, `SELECT string_agg(state, ',' ORDER BY state), string_agg(char_length(last_error)::text, ',')
				FROM outbox`).Scan(&states, &lens); err != nil {
				t.Fatal(err)
			}
			if states != "dead,pending" || lens != "40,40" {
				t.Errorf("rows %s with errors of %s characters, want dead,pending with 40,40", states, lens)
			}
		})
	}
}

// TestTypeFixesRun: the statement the table check prints for a column of
// the wrong type is one PostgreSQL runs, on a table with rows in it, and
// after it the check is satisfied. A sequence column of text once got
// TYPE BIGSERIAL (not a type) and a bytea payload a cast to JSONB that
// PostgreSQL does not have.
func TestTypeFixesRun(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pg.MustExec(t, ctx, `INSERT INTO outbox (topic, payload) VALUES ('t', '{"n": 1}')`)
	pg.MustExec(t, ctx, `ALTER TABLE outbox ALTER COLUMN payload TYPE bytea USING convert_to(payload::text, 'UTF8')`)
	pg.MustExec(t, ctx, `ALTER TABLE outbox ALTER COLUMN sequence TYPE text`)
	plan, err := postgres.ResolveTable(ctx, pg.Pool, dialect.DefaultMapping(), postgres.ModeAuto, false)
	if err != nil {
		t.Fatal(err)
	}
	fixed := map[string]bool{}
	for _, p := range plan.Problems {
		if p.Column != dialect.ColPayload && p.Column != dialect.ColSequence {
			t.Errorf("unexpected problem %+v", p)
			continue
		}
		if _, err := pg.Pool.Exec(ctx, p.Fix); err != nil {
			t.Fatalf("the fix for %s does not run: %s: %v", p.Column, p.Fix, err)
		}
		fixed[p.Column] = true
	}
	if !fixed[dialect.ColPayload] || !fixed[dialect.ColSequence] {
		t.Fatalf("problems %+v: want one for payload and one for sequence", plan.Problems)
	}
	resolve(t, ctx, pg.Pool) // no problems left
	var payload string
	if err := pg.Pool.QueryRow(ctx, `SELECT payload->>'n' FROM outbox`).Scan(&payload); err != nil || payload != "1" {
		t.Fatalf("the row's payload after the fix: %q, %v", payload, err)
	}
}
