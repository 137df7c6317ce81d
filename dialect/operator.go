package dialect

import (
	"context"
	"errors"
	"time"
)

// ErrNoSelector is returned by Inspector.Replay when no selector is given:
// replaying every dead (or sent) row is never what an operator meant.
var ErrNoSelector = errors.New("replay needs at least one selector (ids, topic pattern, key, since or until)")

// Inspector answers the operator's questions: what is pending, what is
// dead, and moves dead (or sent) rows back to pending. It is a separate,
// optional interface: the delivery path does not need it.
type Inspector interface {
	// Stats counts rows by state and measures the backlog.
	Stats(ctx context.Context, p StatsParams) (Stats, error)
	// DeadList lists dead rows, newest first.
	DeadList(ctx context.Context, p DeadListParams) ([]DeadRow, error)
	// Replay moves the selected rows back to pending (attempt 0, due now,
	// error and claim cleared, same id and sequence) and returns how many
	// it moved (or, with DryRun, would move).
	Replay(ctx context.Context, p ReplayParams) (int64, error)
}

// StatsParams are the inputs of Inspector.Stats.
type StatsParams struct {
	TopTopics int // how many topics to list in the backlog (by pending count)
	HeldKeys  int // how many held keys to list
}

// Stats is a snapshot of the table.
type Stats struct {
	ByState          map[string]int64 // logical state -> rows
	OldestPendingAge time.Duration    // age of the oldest due pending row (database clock); 0 when none
	Backlog          []TopicBacklog   // pending rows per topic, largest first
	HeldKeys         []HeldKey        // keys whose head is dead while later rows wait (onDead: hold)
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
	Limit        int
}

// DeadRow is one dead row as the operator sees it.
type DeadRow struct {
	ID        string
	Topic     string
	Key       string
	Attempt   int
	LastError string
	UpdatedAt time.Time
	Held      bool // later rows of its key are waiting on it
}

// ReplayParams select the rows to replay; the selectors combine with AND.
type ReplayParams struct {
	State        string // "dead" (default) or "sent"
	IDs          []string
	TopicPattern string
	Key          string
	Since, Until time.Time
	DryRun       bool
	BatchSize    int // rows per statement, so large replays hold no long locks (default 500)
}

// Empty reports whether no selector is set.
func (p ReplayParams) Empty() bool {
	return len(p.IDs) == 0 && p.TopicPattern == "" && p.Key == "" && p.Since.IsZero() && p.Until.IsZero()
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

// Purger deletes old finished rows (retention). It is optional.
type Purger interface {
	// Purge deletes up to Limit rows of State last updated before
	// now - OlderThan, skipping rows locked by someone else, and returns
	// how many it deleted. Dead rows that hold their key are kept.
	Purge(ctx context.Context, p PurgeParams) (int64, error)
}
