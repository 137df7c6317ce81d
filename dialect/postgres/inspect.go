package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

var (
	_ dialect.Inspector   = (*Dialect)(nil)
	_ dialect.KeyReleaser = (*Dialect)(nil)
	_ dialect.Purger      = (*Dialect)(nil)
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
		oldest                        float64
	)
	if err := d.pool.QueryRow(ctx, d.queries["stats_counts"], !p.WithoutSent).Scan(&pending, &processing, &sent, &dd, &oldest); err != nil {
		return st, interpretError("stats_counts", err)
	}
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
	if err := dialect.TimeBoundsUsable(d.mapping, p.Since, time.Time{}); err != nil {
		return nil, err
	}
	topic, err := optTopic(p.TopicPattern)
	if err != nil {
		return nil, err
	}
	limit := p.RowLimit()
	rows, err := d.pool.Query(ctx, d.queries["dead_list"], topic, optText(p.Key), optTime(p.Since), limit)
	if err != nil {
		return nil, interpretError("dead_list", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (dialect.DeadRow, error) {
		var (
			row          dialect.DeadRow
			key, lastErr *string
		)
		err := r.Scan(&row.ID, &row.Topic, &key, &row.Attempt, &lastErr, &row.UpdatedAt, &row.Held)
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
	if p.Empty() {
		return dialect.ReplayResult{}, outbox.Permanent(dialect.ErrNoSelector)
	}
	from, err := p.FromState()
	if err != nil {
		return dialect.ReplayResult{}, err
	}
	state := d.mapping.State(from)
	topic, err := optTopic(p.TopicPattern)
	if err != nil {
		return dialect.ReplayResult{}, err
	}
	var ids []string
	if len(p.IDs) > 0 && d.opts.idType != "" && d.opts.idType != "uuid" {
		ids = p.IDs // checked by the database's cast to the id type
	} else if len(p.IDs) > 0 {
		ids = make([]string, len(p.IDs))
		for i, id := range p.IDs {
			u, err := uuid.Parse(id)
			if err != nil {
				return dialect.ReplayResult{}, outbox.Permanent(fmt.Errorf("replay: id %q is not a UUID", id))
			}
			ids[i] = u.String()
		}
	}
	if err := dialect.TimeBoundsUsable(d.mapping, p.Since, p.Until); err != nil {
		return dialect.ReplayResult{}, err
	}
	if err := p.CheckWindow(); err != nil {
		return dialect.ReplayResult{}, err
	}
	rows, err := d.pool.Query(ctx, d.queries["replay_select"], state, ids, topic, optText(p.Key), optTime(p.Since), optTime(p.Until))
	if err != nil {
		return dialect.ReplayResult{}, interpretError("replay_select", err)
	}
	selected, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return dialect.ReplayResult{}, interpretError("replay_select", err)
	}
	res := dialect.ReplayResult{Selected: int64(len(selected))}
	if p.DryRun {
		return res, nil
	}
	batch := p.Batch()
	for start := 0; start < len(selected); start += batch {
		n, err := d.replayBatch(ctx, state, selected[start:min(start+batch, len(selected))])
		res.Moved += n
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

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
