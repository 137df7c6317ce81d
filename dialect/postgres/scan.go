package postgres

import (
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

// scanClaim reads the rows of a claim statement rendered for p: with a
// window, each row ends with the start of the next window and the keys that
// block this one, and a claim that took nothing returns one row whose other
// columns are NULL.
func scanClaim(rows rowScanner, p dialect.ClaimParams) (dialect.Claimed, error) {
	return scanRows(rows, p.Limit, p.Window > 0)
}

// scanRows reads claimed rows (the column order of claim.sql and
// lock/claim.sql) and returns them in (sequence, id) order: RETURNING
// follows the UPDATE's join order, not the CTE's ORDER BY.
//
// Every column is scanned as nullable: the rows are already claimed, so a
// value that cannot be read must make its row Malformed (dead with the
// reason), not fail the claim and leave the whole batch processing until
// its lease expires, claim after claim. Adopted tables may allow NULLs the
// bundled table does not.
//
// The nullable targets are values declared once per call, not pointers
// declared per row: pgx scans a **T by allocating a new T through
// reflection for every non-NULL value. For the column types the schema
// check admits (ResolveTable: varchar and text, int2/int4/int8,
// timestamptz) pgtype.Text, pgtype.Int8 and nullTime read the same values
// as *string, *int64 and *time.Time would; nullTime also reads timestamp
// and date, like *time.Time.
func scanRows(rows rowScanner, limit int, withNext bool) (dialect.Claimed, error) {
	defer rows.Close()
	msgs := make([]outbox.Message, 0, limit)
	var (
		id, topic, key, aggregateType pgtype.Text
		attempt, maxAttempts, seq     pgtype.Int8
		createdAt, scheduledAt        nullTime
		start, next                   pgtype.Int8
		blockers                      []pgtype.Text
	)
	targets := []any{&id, &topic, &key, nil, nil, &aggregateType,
		&attempt, &maxAttempts, &seq, &createdAt, &scheduledAt}
	if withNext {
		targets = append(targets, &start, &next, &blockers)
	}
	for rows.Next() {
		var (
			m                outbox.Message
			payload, headers []byte
		)
		targets[3], targets[4] = &payload, &headers
		if err := rows.Scan(targets...); err != nil {
			return dialect.Claimed{}, err
		}
		if !id.Valid {
			// Nothing can settle a row without an id. Lease mode never
			// claims one (its UPDATE joins on the id); lock mode leaves it
			// out of the batch, still pending. ResolveTable's note names
			// the fix.
			continue
		}
		m.ID = id.String
		m.Sequence = seq.Int64
		m.Topic = topic.String // "" when NULL
		m.Key = key.String
		m.AggregateType = aggregateType.String
		m.Attempt = int(attempt.Int64) // 0 when NULL
		m.MaxAttempts = int(maxAttempts.Int64)
		m.CreatedAt = createdAt.Time // the zero time when NULL
		m.ScheduledAt = scheduledAt.Time
		m.Payload = payload
		m.Headers, m.Malformed = dialect.DecodeHeaders(headers)
		switch {
		case !seq.Valid:
			m.Malformed = errors.New("malformed row: the sequence is NULL; per-key order needs it")
		case m.Topic == "":
			m.Malformed = errors.New("malformed row: the topic is NULL or empty")
		case payload == nil:
			m.Malformed = errors.New("malformed row: the payload is NULL")
		}
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return dialect.Claimed{}, err
	}
	slices.SortFunc(msgs, compareMessages)
	c := dialect.Claimed{Messages: msgs, Start: start.Int64, Next: next.Int64, More: next.Valid}
	for _, b := range blockers {
		if b.Valid && b.String != "" {
			c.Blockers = append(c.Blockers, b.String)
		}
	}
	return c, nil
}

// rowScanner is what scanRows reads: pgx.Rows, or turnRows.
type rowScanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// nullTime is a nullable time.Time scan target for date, timestamp and
// timestamptz columns (the three scanner interfaces pgx's own *time.Time
// target implements). NULL and the infinities, which time.Time cannot
// hold, leave the zero time: the row is still delivered. (pgx's *time.Time
// refuses an infinity, and the error failed the whole claim after its
// UPDATE had committed: the batch stayed processing until its lease
// expired, then the next claim failed the same way.)
type nullTime struct{ Time time.Time }

func (t *nullTime) set(v time.Time, valid bool, inf pgtype.InfinityModifier) error {
	if valid && inf == pgtype.Finite {
		t.Time = v
	} else {
		t.Time = time.Time{}
	}
	return nil
}

func (t *nullTime) ScanDate(v pgtype.Date) error {
	return t.set(v.Time, v.Valid, v.InfinityModifier)
}

func (t *nullTime) ScanTimestamp(v pgtype.Timestamp) error {
	return t.set(v.Time, v.Valid, v.InfinityModifier)
}

func (t *nullTime) ScanTimestamptz(v pgtype.Timestamptz) error {
	return t.set(v.Time, v.Valid, v.InfinityModifier)
}
