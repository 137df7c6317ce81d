package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

var (
	_ dialect.Inspector   = (*Dialect)(nil)
	_ dialect.KeyReleaser = (*Dialect)(nil)
	_ dialect.Purger      = (*Dialect)(nil)

	_ dialect.ReplaySummarizer = (*Dialect)(nil)
)

// DefaultReplayBatch is the number of rows a replay moves per statement
// when ReplayParams.BatchSize is 0.
const DefaultReplayBatch = dialect.DefaultReplayBatch

// Stats implements dialect.Inspector. The counts and the oldest age are one
// statement; the backlog per topic and the held keys are read only when
// asked for (TopTopics, HeldKeys > 0), since their cost grows with the
// backlog.
func (d *Dialect) Stats(ctx context.Context, p dialect.StatsParams) (dialect.Stats, error) {
	var (
		st                            dialect.Stats
		pending, processing, sent, dd int64
		oldest, oldestClaim           float64
		expired                       int64
	)
	if err := d.pool.QueryRow(ctx, d.queries["stats_counts"], !p.WithoutSent).Scan(&pending, &processing, &sent, &dd, &oldest,
		&oldestClaim, &expired); err != nil {
		return st, interpretError("stats_counts", err)
	}
	st.Processing = &dialect.ProcessingStats{OldestClaimAge: seconds(oldestClaim), ExpiredLeases: expired}
	st.ByState = dialect.CountsByState(pending, processing, sent, dd)
	if p.WithoutSent {
		delete(st.ByState, string(outbox.StateSent))
	}
	st.OldestPendingAge = seconds(oldest)
	if p.TopTopics > 0 {
		rows, err := d.pool.Query(ctx, d.queries["stats_backlog"], p.TopTopics)
		if err != nil {
			return st, interpretError("stats_backlog", err)
		}
		st.Backlog, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (dialect.TopicBacklog, error) {
			var (
				b   dialect.TopicBacklog
				age float64
			)
			err := r.Scan(&b.Topic, &b.Pending, &age)
			b.OldestPendingAge = seconds(age)
			return b, err
		})
		if err != nil {
			return st, interpretError("stats_backlog", err)
		}
	}
	if p.HeldKeys > 0 && d.opts.hold {
		rows, err := d.pool.Query(ctx, d.queries["stats_held_keys"], p.HeldKeys)
		if err != nil {
			return st, interpretError("stats_held_keys", err)
		}
		st.HeldKeys, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (dialect.HeldKey, error) {
			var h dialect.HeldKey
			err := r.Scan(&h.Key, &h.DeadID, &h.Waiting)
			return h, err
		})
		if err != nil {
			return st, interpretError("stats_held_keys", err)
		}
	}
	return st, nil
}

func seconds(s float64) time.Duration {
	if s <= 0 {
		return 0
	}
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond)
}

// optText is nil for "" so that the SQL's "$n IS NULL OR ..." matches all.
func optText(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// optMicros is a duration before the database's now() in microseconds, or
// NULL.
func optMicros(d *time.Duration) *int64 {
	if d == nil {
		return nil
	}
	us := d.Microseconds()
	return &us
}

func optTopic(pattern string) (*string, error) {
	if pattern == "" {
		return nil, nil
	}
	re, err := topicRegexp(pattern)
	if err != nil {
		return nil, outbox.Permanent(err)
	}
	return &re, nil
}

// DeadList implements dialect.Inspector. A Limit of 0 or less means 50.
func (d *Dialect) DeadList(ctx context.Context, p dialect.DeadListParams) ([]dialect.DeadRow, error) {
	if err := p.TimeBoundsUsable(d.mapping); err != nil {
		return nil, err
	}
	topic, err := optTopic(p.TopicPattern)
	if err != nil {
		return nil, err
	}
	limit := p.RowLimit()
	rows, err := d.pool.Query(ctx, d.queries["dead_list"], topic, optText(p.Key), optTime(p.Since), limit, optMicros(p.SinceAgo))
	if err != nil {
		return nil, interpretError("dead_list", err)
	}
	read := 0
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (dialect.DeadRow, error) {
		if read++; p.Progress != nil {
			p.Progress(read)
		}
		var (
			row          dialect.DeadRow
			key, lastErr *string
			updated      *time.Time // NULL without an updatedAt column (an adopted table)
		)
		err := r.Scan(&row.ID, &row.Topic, &key, &row.Attempt, &lastErr, &updated, &row.Held)
		if updated != nil {
			row.UpdatedAt = *updated
		}
		if key != nil {
			row.Key = *key
		}
		if lastErr != nil {
			row.LastError = *lastErr
		}
		return row, err
	})
	if err != nil {
		return nil, interpretError("dead_list", err)
	}
	return out, nil
}

// Replay implements dialect.Inspector. It reads the ids of the selected rows
// in (sequence, id) order, then moves them in batches of BatchSize, each
// batch its own short statement (and transaction), re-checking the state so
// that a row that changed in between is left alone.
func (d *Dialect) Replay(ctx context.Context, p dialect.ReplayParams) (dialect.ReplayResult, error) {
	state, args, err := d.replaySelection(p)
	if err != nil {
		return dialect.ReplayResult{}, err
	}
	rows, err := d.pool.Query(ctx, d.queries["replay_select"], args...)
	if err != nil {
		return dialect.ReplayResult{}, interpretError("replay_select", err)
	}
	selected, err := collectReplayIDs(rows, d.opts.idType == "" || d.opts.idType == "uuid")
	if err != nil {
		return dialect.ReplayResult{}, interpretError("replay_select", err)
	}
	res := dialect.ReplayResult{Selected: int64(selected.len())}
	if p.DryRun {
		return res, nil
	}
	p.ReportProgress(0, res.Selected)
	batch := p.Batch()
	for start := 0; start < selected.len(); start += batch {
		end := min(start+batch, selected.len())
		n, err := d.replayBatch(ctx, state, selected.slice(start, end))
		res.Moved += n
		if err != nil {
			return res, err
		}
		p.ReportProgress(int64(end), res.Selected)
	}
	return res, nil
}

// replaySelection checks p and returns the stored value of the state it
// replays and the arguments of replay_select and replay_topics.
func (d *Dialect) replaySelection(p dialect.ReplayParams) (string, []any, error) {
	if p.Empty() {
		return "", nil, outbox.Permanent(dialect.ErrNoSelector)
	}
	from, err := p.FromState()
	if err != nil {
		return "", nil, err
	}
	state := d.mapping.State(from)
	topic, err := optTopic(p.TopicPattern)
	if err != nil {
		return "", nil, err
	}
	ids, err := d.replayIDParams(p.IDs)
	if err != nil {
		return "", nil, err
	}
	if err := p.TimeBoundsUsable(d.mapping); err != nil {
		return "", nil, err
	}
	if err := p.CheckWindow(); err != nil {
		return "", nil, err
	}
	return state, []any{state, ids, topic, optText(p.Key), optTime(p.Since), optTime(p.Until), optMicros(p.SinceAgo), optMicros(p.UntilAgo)}, nil
}

// ReplayTopics implements dialect.ReplaySummarizer.
func (d *Dialect) ReplayTopics(ctx context.Context, p dialect.ReplayParams) (dialect.ReplaySummary, error) {
	var sum dialect.ReplaySummary
	_, args, err := d.replaySelection(p)
	if err != nil {
		return sum, err
	}
	rows, err := d.pool.Query(ctx, d.queries["replay_topics"], args...)
	if err != nil {
		return sum, interpretError("replay_topics", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			t    dialect.ReplayTopic
			last *time.Time
		)
		if err := rows.Scan(&t.Topic, &t.Rows, &last, &sum.Now); err != nil {
			return sum, interpretError("replay_topics", err)
		}
		if last != nil {
			t.LastUpdated = *last
		}
		sum.Topics = append(sum.Topics, t)
	}
	if err := rows.Err(); err != nil {
		return sum, interpretError("replay_topics", err)
	}
	if sum.Now.IsZero() {
		if err := d.pool.QueryRow(ctx, "SELECT now()").Scan(&sum.Now); err != nil {
			return sum, interpretError("replay_topics", err)
		}
	}
	return sum, nil
}

// replayIDs holds the ids a replay selected, in selection order: UUIDs as
// 16 bytes each (a million dead rows take 16 MiB in the CLI, not the ~64
// MiB of as many strings), any other id type as text.
type replayIDs struct {
	uuids []uuid.UUID
	texts []string
}

// collectReplayIDs reads replay_select's rows. asUUID says the id column is
// a uuid: the text the query returns is parsed into 16 bytes, without a
// string per row.
func collectReplayIDs(rows pgx.Rows, asUUID bool) (replayIDs, error) {
	defer rows.Close()
	var ids replayIDs
	for rows.Next() {
		raw := rows.RawValues()
		if len(raw) != 1 || raw[0] == nil {
			return replayIDs{}, errors.New("replay_select returned a row without an id")
		}
		if !asUUID {
			ids.texts = append(ids.texts, string(raw[0]))
			continue
		}
		u, err := uuid.ParseBytes(raw[0])
		if err != nil {
			return replayIDs{}, fmt.Errorf("replay_select returned id %q, not a UUID: %w", raw[0], err)
		}
		ids.uuids = append(ids.uuids, u)
	}
	return ids, rows.Err()
}

func (r replayIDs) len() int { return len(r.uuids) + len(r.texts) }

// slice returns the ids [i, j) as text, the form replay.sql takes.
func (r replayIDs) slice(i, j int) []string {
	if r.texts != nil {
		return r.texts[i:j]
	}
	out := make([]string, 0, j-i)
	for _, u := range r.uuids[i:j] {
		out = append(out, u.String())
	}
	return out
}

// replayIDParams checks the ids a replay selects against the table's id
// type and returns them as replay_select takes them: UUIDs in canonical
// form, integers as given; any other type (text, numeric) is left to the
// database's cast. nil when no id is selected.
func (d *Dialect) replayIDParams(in []string) ([]string, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make([]string, len(in))
	for i, id := range in {
		switch d.opts.idType {
		case "", "uuid":
			u, err := uuid.Parse(id)
			if err != nil {
				return nil, outbox.Permanent(fmt.Errorf("replay: %w: %q is not a UUID (the table's id column is uuid)", dialect.ErrBadID, dialect.Snippet([]byte(id))))
			}
			out[i] = u.String()
		case "bigint", "integer", "smallint":
			bits := map[string]int{"bigint": 64, "integer": 32, "smallint": 16}[d.opts.idType]
			if _, err := strconv.ParseInt(strings.TrimSpace(id), 10, bits); err != nil {
				return nil, outbox.Permanent(fmt.Errorf("replay: %w: %q is not a %d-bit integer (the table's id column is %s)", dialect.ErrBadID, dialect.Snippet([]byte(id)), bits, d.opts.idType))
			}
			out[i] = strings.TrimSpace(id)
		case "numeric":
			if !numericLiteral.MatchString(id) {
				return nil, outbox.Permanent(fmt.Errorf("replay: %w: %q is not a number (the table's id column is numeric)", dialect.ErrBadID, dialect.Snippet([]byte(id))))
			}
			out[i] = strings.TrimSpace(id)
		default:
			out[i] = id
		}
	}
	return out, nil
}

// numericLiteral is what PostgreSQL's numeric input accepts: a decimal
// number with an optional exponent, NaN, or an infinity.
var numericLiteral = regexp.MustCompile(`(?i)^\s*([+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(e[+-]?[0-9]+)?|nan|[+-]?(infinity|inf))\s*$`)

// replayBatch runs replay.sql for one batch of ids. With the table's claim
// turn it takes the turn first, in the same transaction: the statement then
// sees every claim committed before it, and leaves the rows whose key has
// one in flight (replay.sql).
func (d *Dialect) replayBatch(ctx context.Context, state string, ids []string) (int64, error) {
	if d.turnSQL == "" {
		return d.exec(ctx, "replay", state, ids)
	}
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return 0, interpretError("replay", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, d.turnSQL); err != nil {
		return 0, interpretError("replay: claim turn", err)
	}
	tag, err := tx.Exec(ctx, d.queries["replay"], state, ids)
	if err != nil {
		return 0, interpretError("replay", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, interpretError("replay", err)
	}
	return tag.RowsAffected(), nil
}

// ReleaseKey implements dialect.KeyReleaser.
func (d *Dialect) ReleaseKey(ctx context.Context, key string) (int64, error) {
	if key == "" {
		return 0, outbox.Permanent(errors.New("release: a key is required"))
	}
	return d.exec(ctx, "dead_release", key)
}

// Purge implements dialect.Purger.
func (d *Dialect) Purge(ctx context.Context, p dialect.PurgeParams) (int64, error) {
	purged, err := p.PurgedState()
	if err != nil {
		return 0, err
	}
	state := d.mapping.State(purged)
	if p.Limit <= 0 || p.OlderThan < 0 {
		return 0, nil
	}
	return d.exec(ctx, "purge", state, micros(p.OlderThan), p.Limit)
}

// StateCount is a value of the state column and its rows.
type StateCount struct {
	Value string // "" for NULL
	Null  bool
	Rows  int64
}

// UnmappedStates returns the values of the state column that no state of
// the mapping names, with their rows, most rows first (at most 10). Rows
// with such a value are neither pending nor any other state: nothing claims
// them and stats does not count them, so a state mapping that does not
// match the data (pending: "new" over rows that say 'NEW') delivers nothing
// and says nothing. It reads the whole table, so it runs within the given
// time (a statement timeout, at least 1 ms); `queuebox check` runs it, the
// relay does not. ok is false when the table could not be read in time.
func (d *Dialect) UnmappedStates(ctx context.Context, within time.Duration) (values []StateCount, ok bool, err error) {
	mapped := d.mapping.StateValues()
	q, err := renderFiles(ownFiles, "sql/check", []string{"unmapped_states"}, d.mapping, d.opts)
	if err != nil {
		return nil, false, err
	}
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return nil, false, interpretError("unmapped states", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// set_config(…, true) is SET LOCAL: the timeout ends with the transaction.
	timeout := strconv.FormatInt(max(1, within.Milliseconds()), 10)
	if _, err := tx.Exec(ctx, "SELECT set_config('statement_timeout', $1, true)", timeout); err != nil {
		return nil, false, interpretError("unmapped states", err)
	}
	rows, err := tx.Query(ctx, q["unmapped_states"], mapped)
	if err == nil {
		values, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (StateCount, error) {
			var (
				c StateCount
				v *string
			)
			err := r.Scan(&v, &c.Null, &c.Rows)
			if v != nil {
				c.Value = *v
			}
			return c, err
		})
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "57014" { // query_canceled: the statement timeout
		return nil, false, nil
	}
	if err != nil {
		return nil, false, interpretError("unmapped states", err)
	}
	return values, true, nil
}
