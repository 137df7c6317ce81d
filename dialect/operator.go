package dialect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/queuebox/queuebox/outbox"
)

// ErrNoSelector is returned by Inspector.Replay when no selector is given:
// replaying every dead (or sent) row is never what an operator meant.
var ErrNoSelector = errors.New("replay needs at least one selector (ids, topic pattern, key, since or until)")

// ErrBadID is wrapped by the (permanent) error Inspector.Replay returns
// when a selected id cannot be a value of the table's id column: not a
// UUID for a uuid id, not an integer for an integer id. The CLI reports it
// as a usage error.
var ErrBadID = errors.New("bad id")

// Inspector answers the operator's questions: what is pending, what is
// dead, and moves dead (or sent) rows back to pending. It is a separate,
// optional interface: the delivery path does not need it.
type Inspector interface {
	// Stats counts rows by state and measures the backlog.
	Stats(ctx context.Context, p StatsParams) (Stats, error)
	// DeadList lists dead rows, newest first.
	DeadList(ctx context.Context, p DeadListParams) ([]DeadRow, error)
	// Replay moves the selected rows back to pending (attempt 0, due now,
	// error and claim cleared, same id and sequence). It reads the
	// selection once and reports how many rows it selected and how many
	// of them it moved; with DryRun it moves none.
	Replay(ctx context.Context, p ReplayParams) (ReplayResult, error)
}

// ReplaySummarizer is implemented by dialects that can say, before a
// replay, what it would move per topic and when those rows were last
// updated: the CLI asks it before a replay of sent rows, whose JetStream
// messages a stream drops as duplicates within its duplicate window. It is
// optional.
type ReplaySummarizer interface {
	// ReplayTopics summarises the rows p selects (DryRun and BatchSize
	// aside) per topic.
	ReplayTopics(ctx context.Context, p ReplayParams) (ReplaySummary, error)
}

// ReplaySummary is what ReplaySummarizer.ReplayTopics read.
type ReplaySummary struct {
	Now    time.Time // the database's clock when it was read
	Topics []ReplayTopic
}

// ReplayTopic is the selected rows of one topic.
type ReplayTopic struct {
	Topic string
	Rows  int64
	// LastUpdated is the latest updatedAt of those rows (for sent rows,
	// when the last was sent); zero when the table has no such column.
	LastUpdated time.Time
}

// ReplayResult is what Inspector.Replay did. Moved is at most Selected: a
// selected keyed row whose key has a row processing is left as it is
// (moved back then, it would be its key's head while that row is out, two
// rows of one key in flight), and so is a row that changed after it was
// selected. On an error, Moved counts the rows moved before it.
type ReplayResult struct {
	Selected int64 // rows the selectors matched when the replay read them
	Moved    int64 // rows moved back to pending
}

// Left is the number of selected rows the replay did not move.
func (r ReplayResult) Left() int64 { return r.Selected - r.Moved }

// StatsParams are the inputs of Inspector.Stats.
type StatsParams struct {
	TopTopics int // how many topics to list in the backlog (by pending count)
	HeldKeys  int // how many held keys to list
	// WithoutSent tells the dialect that the caller needs no count of sent
	// rows (the relay's backlog gauges). It is the one count that grows
	// with every delivered row that retention has not deleted yet; a
	// dialect may then leave "sent" out of ByState instead of counting.
	WithoutSent bool
}

// Stats is a snapshot of the table.
type Stats struct {
	ByState          map[string]int64 // logical state -> rows
	OldestPendingAge time.Duration    // age of the oldest due pending row (database clock); 0 when none
	Backlog          []TopicBacklog   // pending rows per topic, largest first
	HeldKeys         []HeldKey        // keys whose head is dead while later rows wait (onDead: hold)
	// Processing describes the rows being delivered, when the dialect reads
	// it (PostgreSQL); nil otherwise.
	Processing *ProcessingStats
}

// ProcessingStats describes the processing rows: claimed by a relay, being
// published. A row whose relay crashed stays processing, and holds its key,
// until its lease expires and a relay's reaper returns it to pending.
type ProcessingStats struct {
	OldestClaimAge time.Duration // since the oldest processing row was claimed (database clock); 0 when none
	ExpiredLeases  int64         // processing rows whose lease has expired: waiting for a reaper
}

// CountsByState is Stats.ByState for the four counts of a stats
// statement.
func CountsByState(pending, processing, sent, dead int64) map[string]int64 {
	return map[string]int64{
		string(outbox.StatePending):    pending,
		string(outbox.StateProcessing): processing,
		string(outbox.StateSent):       sent,
		string(outbox.StateDead):       dead,
	}
}

// TopicBacklog is the pending backlog of one topic.
type TopicBacklog struct {
	Topic            string
	Pending          int64
	OldestPendingAge time.Duration
}

// HeldKey is a key held by a dead head row.
type HeldKey struct {
	Key     string
	DeadID  string
	Waiting int64
}

// DeadListParams are the inputs of Inspector.DeadList.
type DeadListParams struct {
	TopicPattern string    // router pattern; empty: all
	Key          string    // exact key; empty: all
	Since        time.Time // updated at or after; zero: no bound
	// SinceAgo, when not nil, bounds updated_at on the database clock:
	// at or after the database's now minus it (dead list --since 2h). A
	// time computed on the host's clock would be off by the skew between
	// the two.
	SinceAgo *time.Duration
	Limit    int
	// Progress, when not nil, is called with the number of rows read so
	// far, as they arrive (a large export takes a while).
	Progress func(read int)
}

// TimeBoundsUsable is the package function for p's bounds.
func (p DeadListParams) TimeBoundsUsable(m Mapping) error {
	return timeBoundsUsable(m, !p.Since.IsZero() || p.SinceAgo != nil, false)
}

// DefaultDeadListLimit is the number of rows DeadList returns when
// DeadListParams.Limit is 0 or less.
const DefaultDeadListLimit = 50

// RowLimit is Limit, or DefaultDeadListLimit when Limit is 0 or less.
func (p DeadListParams) RowLimit() int {
	if p.Limit <= 0 {
		return DefaultDeadListLimit
	}
	return p.Limit
}

// DeadRow is one dead row as the operator sees it.
type DeadRow struct {
	ID        string
	Topic     string
	Key       string
	Attempt   int
	LastError string
	UpdatedAt time.Time // when it died; zero when the table has no updatedAt column
	// Held is the row's own hold (relay.onDead: hold): the key's later
	// rows wait for it, whether or not any wait yet, until a replay or a
	// KeyReleaser clears it.
	Held bool
}

// ReplayParams select the rows to replay; the selectors combine with AND.
type ReplayParams struct {
	State        string // "dead" (default) or "sent"
	IDs          []string
	TopicPattern string
	Key          string
	Since, Until time.Time
	// SinceAgo and UntilAgo, when not nil, bound updated_at on the
	// database clock, as the database's now minus them (replay --since 2h
	// --until 30m).
	SinceAgo, UntilAgo *time.Duration
	DryRun             bool
	BatchSize          int // rows per statement, so large replays hold no long locks (default 500)
	// Progress, when not nil, is called after the selection is read and
	// after each batch: done is the selected rows handled so far (moved or
	// left), total the rows selected, or -1 while the dialect does not
	// know it yet (one that reads the selection a page at a time).
	Progress func(done, total int64)
}

// ReportProgress calls Progress, when set.
func (p ReplayParams) ReportProgress(done, total int64) {
	if p.Progress != nil {
		p.Progress(done, total)
	}
}

// Empty reports whether no selector is set.
func (p ReplayParams) Empty() bool {
	return len(p.IDs) == 0 && p.TopicPattern == "" && p.Key == "" && p.Since.IsZero() && p.Until.IsZero() &&
		p.SinceAgo == nil && p.UntilAgo == nil
}

// TimeBoundsUsable is the package function for p's bounds.
func (p ReplayParams) TimeBoundsUsable(m Mapping) error {
	return timeBoundsUsable(m, !p.Since.IsZero() || p.SinceAgo != nil, !p.Until.IsZero() || p.UntilAgo != nil)
}

// DefaultReplayBatch is the number of rows a replay moves per statement
// when ReplayParams.BatchSize is 0 or less.
const DefaultReplayBatch = 500

// Batch is BatchSize, or DefaultReplayBatch when BatchSize is 0 or less.
func (p ReplayParams) Batch() int {
	if p.BatchSize <= 0 {
		return DefaultReplayBatch
	}
	return p.BatchSize
}

// FromState is the logical state the rows are replayed from: dead (State
// "" or "dead") or sent. Any other State is a permanent error.
func (p ReplayParams) FromState() (outbox.State, error) {
	switch p.State {
	case "", string(outbox.StateDead):
		return outbox.StateDead, nil
	case string(outbox.StateSent):
		return outbox.StateSent, nil
	}
	return "", outbox.Permanent(fmt.Errorf("replay: state %q: want dead or sent", p.State))
}

// CheckWindow is a permanent error when both Since and Until are set and
// Until is not after Since (or both SinceAgo and UntilAgo, and UntilAgo is
// not the shorter).
func (p ReplayParams) CheckWindow() error {
	if !p.Since.IsZero() && !p.Until.IsZero() && !p.Until.After(p.Since) {
		return outbox.Permanent(fmt.Errorf("replay: until (%s) is not after since (%s)", p.Until.Format(time.RFC3339), p.Since.Format(time.RFC3339)))
	}
	if p.SinceAgo != nil && p.UntilAgo != nil && *p.UntilAgo >= *p.SinceAgo {
		return outbox.Permanent(fmt.Errorf("replay: until (%s ago) is not after since (%s ago)", *p.UntilAgo, *p.SinceAgo))
	}
	return nil
}

// TimeBoundsUsable reports whether rows of a table with mapping m can be
// selected by their updatedAt time (ReplayParams and DeadListParams Since
// and Until): an error when a bound is set and the table has no updatedAt
// column. Without this check a table lacking the column matched every row:
// replay --state sent --since 1h replayed the whole sent history.
func TimeBoundsUsable(m Mapping, since, until time.Time) error {
	return timeBoundsUsable(m, !since.IsZero(), !until.IsZero())
}

func timeBoundsUsable(m Mapping, since, until bool) error {
	if (!since && !until) || m.Has(ColUpdatedAt) {
		return nil
	}
	bound := "since and until select"
	switch {
	case !until:
		bound = "since selects"
	case !since:
		bound = "until selects"
	}
	return outbox.Permanent(fmt.Errorf("%s rows by their updatedAt column, which this table does not have (database.columns.updatedAt): select by id, topic or key instead", bound))
}

// KeyReleaser is implemented by dialects that can hold keys
// (relay.onDead: hold).
type KeyReleaser interface {
	// ReleaseKey lets the later rows of key flow while its dead rows stay
	// dead: it clears the hold of every dead row of key and returns how
	// many it cleared (0 when nothing held the key).
	ReleaseKey(ctx context.Context, key string) (int64, error)
}

// PurgeParams are the inputs of Purger.Purge.
type PurgeParams struct {
	State     string        // "sent" or "dead"; pending and processing rows are never purged
	OlderThan time.Duration // rows last updated more than this long ago (database clock)
	Limit     int           // the most rows to delete in this statement
}

// PurgedState is the logical state to purge: sent or dead. Any other State
// is a permanent error.
func (p PurgeParams) PurgedState() (outbox.State, error) {
	switch p.State {
	case string(outbox.StateSent):
		return outbox.StateSent, nil
	case string(outbox.StateDead):
		return outbox.StateDead, nil
	}
	return "", outbox.Permanent(fmt.Errorf("purge: state %q: only sent and dead rows are purged", p.State))
}

// Purger deletes old finished rows (retention). It is optional.
type Purger interface {
	// Purge deletes up to Limit rows of State last updated before
	// now - OlderThan, skipping rows locked by someone else, and returns
	// how many it deleted. Dead rows that hold their key are kept.
	Purge(ctx context.Context, p PurgeParams) (int64, error)
}
