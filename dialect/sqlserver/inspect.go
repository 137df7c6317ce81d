package sqlserver

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

// The operator surface. Hold (relay.onDead: hold) is PostgreSQL-only, so
// this dialect implements dialect.Inspector and dialect.Purger but not
// dialect.KeyReleaser; its dead_release and stats_held_keys statements
// exist for query-set parity and select nothing.
var (
	_ dialect.Inspector        = (*Dialect)(nil)
	_ dialect.Purger           = (*Dialect)(nil)
	_ dialect.ReplaySummarizer = (*Dialect)(nil)
)

// DefaultReplayBatch is the number of rows a replay reads and moves per
// statement when ReplayParams.BatchSize is 0 (the PostgreSQL dialect's
// default too).
const DefaultReplayBatch = dialect.DefaultReplayBatch

// deadListPage is the most rows DeadList reads per statement while it
// filters by topic pattern in Go.
const deadListPage = 500

// Stats implements dialect.Inspector. The counts and the oldest age are one
// statement; the backlog per topic is read only when asked for (TopTopics >
// 0). HeldKeys is always empty: this dialect never holds a key.
func (d *Dialect) Stats(ctx context.Context, p dialect.StatsParams) (dialect.Stats, error) {
	var (
		st                            dialect.Stats
		pending, processing, sent, dd int64
		oldestMS                      int64
	)
	if err := d.db.QueryRowContext(ctx, d.queries["stats_counts"]).Scan(&pending, &processing, &sent, &dd, &oldestMS); err != nil {
		return st, interpretError("stats_counts", err)
	}
	st.ByState = dialect.CountsByState(pending, processing, sent, dd)
	st.OldestPendingAge = msDuration(oldestMS)
	if p.TopTopics > 0 {
		rows, err := d.db.QueryContext(ctx, d.queries["stats_backlog"], sql.Named("n", int64(p.TopTopics)))
		if err != nil {
			return st, interpretError("stats_backlog", err)
		}
		defer rows.Close()
		for rows.Next() {
			var (
				b  dialect.TopicBacklog
				ms int64
			)
			if err := rows.Scan(&b.Topic, &b.Pending, &ms); err != nil {
				return st, interpretError("stats_backlog", err)
			}
			b.OldestPendingAge = msDuration(ms)
			st.Backlog = append(st.Backlog, b)
		}
		if err := rows.Err(); err != nil {
			return st, interpretError("stats_backlog", err)
		}
	}
	return st, nil
}

func msDuration(ms int64) time.Duration {
	if ms <= 0 {
		return 0
	}
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ms) * time.Millisecond
}

// nullText is SQL NULL for "" (the statements read NULL as "any").
func nullText(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// agoParams are the parameters name_s and name_ms of a duration before
// the database's now (two INTs, as DATEADD takes; see purge), or NULLs.
func agoParams(name string, d *time.Duration) (sql.NamedArg, sql.NamedArg) {
	var s, ms sql.NullInt32
	if d != nil {
		total := millis(*d)
		secs, rest := max(min(total/1000, maxAgeSeconds), -maxAgeSeconds), total%1000
		if secs != total/1000 {
			rest = 0
		}
		s = sql.NullInt32{Int32: int32(secs), Valid: true}
		ms = sql.NullInt32{Int32: int32(rest), Valid: true}
	}
	return sql.Named(name+"_s", s), sql.Named(name+"_ms", ms)
}

// nullTime is SQL NULL for the zero time, else the time in UTC (the driver
// sends it as DATETIMEOFFSET; the statements compare it in UTC).
func nullTime(t time.Time) sql.NullTime { return sql.NullTime{Time: t.UTC(), Valid: !t.IsZero()} }

// DeadList implements dialect.Inspector. A Limit of 0 or less means 50.
// With a topic pattern the statement narrows the rows by a LIKE superset of
// the pattern and DeadList keeps the rows the router pattern matches,
// reading further pages (newest first, each starting after the last row of
// the one before) until it has Limit rows or the dead rows run out.
func (d *Dialect) DeadList(ctx context.Context, p dialect.DeadListParams) ([]dialect.DeadRow, error) {
	if err := p.TimeBoundsUsable(d.mapping); err != nil {
		return nil, err
	}
	sinceS, sinceMS := agoParams("since_ago", p.SinceAgo)
	topic, err := parseTopicFilter(p.TopicPattern)
	if err != nil {
		return nil, err
	}
	limit := p.RowLimit()
	page := limit
	if topic.set {
		page = max(limit, deadListPage)
	}
	c := deadListCursor{limit: limit, topic: topic, progress: p.Progress}
	for {
		n, err := d.deadListPage(ctx, &c, page, p, sinceS, sinceMS)
		if err != nil {
			return nil, err
		}
		if len(c.out) >= limit || n < page {
			return c.out, nil
		}
	}
}

// deadListCursor is where a dead list is: the rows kept so far and the row
// the next page starts after.
type deadListCursor struct {
	limit        int
	topic        topicFilter
	progress     func(int)
	out          []dialect.DeadRow
	afterUpdated sql.NullTime
	afterSeq     sql.NullInt64
}

// deadListPage reads one page of dead_list after the cursor, keeps the rows
// whose topic matches (up to the limit) and returns how many rows the page
// had.
func (d *Dialect) deadListPage(ctx context.Context, c *deadListCursor, page int, p dialect.DeadListParams, sinceS, sinceMS sql.NamedArg) (int, error) {
	rows, err := d.db.QueryContext(ctx, d.queries["dead_list"],
		sql.Named("n", int64(page)), sql.Named("topic_like", c.topic.param()), sql.Named("key", nullText(p.Key)),
		sql.Named("since", nullTime(p.Since)), sinceS, sinceMS, sql.Named("after_updated", c.afterUpdated), sql.Named("after_seq", c.afterSeq))
	if err != nil {
		return 0, interpretError("dead_list", err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var (
			row          dialect.DeadRow
			key, lastErr sql.NullString
			updated      sql.NullTime
			seq          int64
		)
		if err := rows.Scan(&row.ID, &row.Topic, &key, &row.Attempt, &lastErr, &updated, &row.Held, &seq); err != nil {
			return 0, interpretError("dead_list", err)
		}
		n++
		c.afterUpdated = sql.NullTime{Time: updated.Time.UTC(), Valid: updated.Valid}
		c.afterSeq = sql.NullInt64{Int64: seq, Valid: true}
		if !c.topic.match(row.Topic) || len(c.out) == c.limit {
			continue
		}
		row.Key, row.LastError = key.String, lastErr.String
		if updated.Valid {
			row.UpdatedAt = updated.Time.UTC()
		}
		c.out = append(c.out, row)
		if c.progress != nil {
			c.progress(len(c.out))
		}
	}
	if err := rows.Err(); err != nil {
		return 0, interpretError("dead_list", err)
	}
	return n, nil
}

// Replay implements dialect.Inspector. It reads the ids of the selected
// rows in (sequence, id) order, one page of BatchSize rows per statement
// (each page starting after the last row of the one before), keeps those
// whose topic the router pattern matches, and moves each page's ids with
// one short statement (and transaction) that re-checks the state, so that
// a row that changed in between is left alone.
func (d *Dialect) Replay(ctx context.Context, p dialect.ReplayParams) (dialect.ReplayResult, error) {
	state, topic, ids, err := d.replaySelection(p)
	if err != nil {
		return dialect.ReplayResult{}, err
	}
	batch := p.Batch()
	var (
		res      dialect.ReplayResult
		afterSeq sql.NullInt64
		afterID  sql.NullString
	)
	for {
		selected, n, err := d.replayPage(ctx, batch, state, ids, topic, p, &afterSeq, &afterID)
		if err != nil {
			return res, err
		}
		res.Selected += int64(len(selected))
		if !p.DryRun && len(selected) > 0 {
			doc, err := json.Marshal(selected)
			if err != nil {
				return res, err
			}
			k, err := d.exec(ctx, "replay", sql.Named("state", state), sql.Named("ids", string(doc)))
			res.Moved += k
			if err != nil {
				return res, err
			}
		}
		if n < batch {
			if !p.DryRun {
				p.ReportProgress(res.Selected, res.Selected)
			}
			return res, nil
		}
		if !p.DryRun {
			// The selection is read a page at a time: the total is not
			// known before the last page.
			p.ReportProgress(res.Selected, -1)
		}
	}
}

// replaySelection checks p and returns the stored value of the state it
// replays, the topic filter and the ids as a JSON array (NULL: any).
func (d *Dialect) replaySelection(p dialect.ReplayParams) (string, topicFilter, sql.NullString, error) {
	var ids sql.NullString
	if p.Empty() {
		return "", topicFilter{}, ids, outbox.Permanent(dialect.ErrNoSelector)
	}
	from, err := p.FromState()
	if err != nil {
		return "", topicFilter{}, ids, err
	}
	topic, err := parseTopicFilter(p.TopicPattern)
	if err != nil {
		return "", topicFilter{}, ids, err
	}
	if len(p.IDs) > 0 {
		canon := make([]string, len(p.IDs))
		for i, id := range p.IDs {
			u, err := uuid.Parse(id)
			if err != nil {
				return "", topicFilter{}, ids, outbox.Permanent(fmt.Errorf("replay: %w: %q is not a UUID", dialect.ErrBadID, dialect.Snippet([]byte(id))))
			}
			canon[i] = u.String()
		}
		doc, err := json.Marshal(canon)
		if err != nil {
			return "", topicFilter{}, ids, err
		}
		ids = sql.NullString{String: string(doc), Valid: true}
	}
	if err := p.TimeBoundsUsable(d.mapping); err != nil {
		return "", topicFilter{}, ids, err
	}
	if err := p.CheckWindow(); err != nil {
		return "", topicFilter{}, ids, err
	}
	return d.mapping.State(from), topic, ids, nil
}

// ReplayTopics implements dialect.ReplaySummarizer: replay_topics groups by
// the stored topic; the groups the router pattern does not match exactly
// are left out here.
func (d *Dialect) ReplayTopics(ctx context.Context, p dialect.ReplayParams) (dialect.ReplaySummary, error) {
	var sum dialect.ReplaySummary
	state, topic, ids, err := d.replaySelection(p)
	if err != nil {
		return sum, err
	}
	sinceS, sinceMS := agoParams("since_ago", p.SinceAgo)
	untilS, untilMS := agoParams("until_ago", p.UntilAgo)
	rows, err := d.db.QueryContext(ctx, d.queries["replay_topics"],
		sql.Named("state", state), sql.Named("ids", ids),
		sql.Named("topic_like", topic.param()), sql.Named("key", nullText(p.Key)),
		sql.Named("since", nullTime(p.Since)), sql.Named("until", nullTime(p.Until)),
		sinceS, sinceMS, untilS, untilMS)
	if err != nil {
		return sum, interpretError("replay_topics", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			t    dialect.ReplayTopic
			last sql.NullTime
			now  time.Time
		)
		if err := rows.Scan(&t.Topic, &t.Rows, &last, &now); err != nil {
			return sum, interpretError("replay_topics", err)
		}
		sum.Now = now.UTC()
		if last.Valid {
			t.LastUpdated = last.Time.UTC()
		}
		if topic.match(t.Topic) {
			sum.Topics = append(sum.Topics, t)
		}
	}
	if err := rows.Err(); err != nil {
		return sum, interpretError("replay_topics", err)
	}
	if sum.Now.IsZero() {
		if err := d.db.QueryRowContext(ctx, "SELECT SYSUTCDATETIME()").Scan(&sum.Now); err != nil {
			return sum, interpretError("replay_topics", err)
		}
		sum.Now = sum.Now.UTC()
	}
	return sum, nil
}

// replayPage reads one page of replay_select after the cursor, advances the
// cursor, and returns the ids on the page whose topic matches and how many
// rows the page had.
func (d *Dialect) replayPage(ctx context.Context, batch int, state string, ids sql.NullString, topic topicFilter,
	p dialect.ReplayParams, afterSeq *sql.NullInt64, afterID *sql.NullString) ([]string, int, error) {
	sinceS, sinceMS := agoParams("since_ago", p.SinceAgo)
	untilS, untilMS := agoParams("until_ago", p.UntilAgo)
	rows, err := d.db.QueryContext(ctx, d.queries["replay_select"],
		sql.Named("n", int64(batch)), sql.Named("state", state), sql.Named("ids", ids),
		sql.Named("topic_like", topic.param()), sql.Named("key", nullText(p.Key)),
		sql.Named("since", nullTime(p.Since)), sql.Named("until", nullTime(p.Until)),
		sinceS, sinceMS, untilS, untilMS,
		sql.Named("after_seq", *afterSeq), sql.Named("after_id", *afterID))
	if err != nil {
		return nil, 0, interpretError("replay_select", err)
	}
	defer rows.Close()
	var (
		out []string
		n   int
	)
	for rows.Next() {
		var (
			id, t string
			seq   int64
		)
		if err := rows.Scan(&id, &t, &seq); err != nil {
			return nil, 0, interpretError("replay_select", err)
		}
		n++
		*afterSeq = sql.NullInt64{Int64: seq, Valid: true}
		*afterID = sql.NullString{String: id, Valid: true}
		if topic.match(t) {
			out = append(out, id)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, interpretError("replay_select", err)
	}
	return out, n, nil
}

// maxAgeSeconds bounds PurgeParams.OlderThan to what DATEADD(second, ...)
// takes (an INT, about 68 years).
const maxAgeSeconds = math.MaxInt32

// Purge implements dialect.Purger: one statement that deletes up to Limit
// rows, skipping rows locked by someone else.
func (d *Dialect) Purge(ctx context.Context, p dialect.PurgeParams) (int64, error) {
	purged, err := p.PurgedState()
	if err != nil {
		return 0, err
	}
	state := d.mapping.State(purged)
	if p.Limit <= 0 || p.OlderThan < 0 {
		return 0, nil
	}
	ms := millis(p.OlderThan)
	ageS, ageMS := min(ms/1000, maxAgeSeconds), ms%1000
	if ms/1000 > maxAgeSeconds {
		ageMS = 0
	}
	return d.exec(ctx, "purge", sql.Named("state", state), sql.Named("age_s", int32(ageS)),
		sql.Named("age_ms", int32(ageMS)), sql.Named("limit", int64(p.Limit)))
}
