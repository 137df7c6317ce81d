// Package dialect defines what the relay needs from a database: the SQL that
// differs between PostgreSQL and SQL Server, and nothing else. Batching,
// backoff and routing live once, in package relay.
//
// Every write after a claim is fenced: it matches the row id, the
// processing state, the claim token and an unexpired lease, all on the
// database clock. A fenced write returns the number of rows it changed; the
// caller compares it with the number it asked for and counts the difference
// as lost claims (outbox.ErrLeaseLost), never retrying them.
package dialect

import (
	"context"
	"errors"
	"time"

	"github.com/queuebox/queuebox/outbox"
)

// Dialect is the SQL of one database for the delivery path.
type Dialect interface {
	// Claim moves up to Limit ready rows to processing under a fresh lease
	// held by Token and returns them in sequence order. A row is ready when
	// it is pending, due (scheduled_at <= now on the database clock) and,
	// if it has a non-empty key, is the head of its key: the lowest sequence
	// among that key's pending and processing rows. At most one row per key
	// is returned.
	Claim(ctx context.Context, p ClaimParams) ([]outbox.Message, error)
	// Renew extends the lease of every row still held by Token and returns
	// how many rows it renewed.
	Renew(ctx context.Context, p RenewParams) (int64, error)
	// Complete marks the given rows sent.
	Complete(ctx context.Context, p CompleteParams) (int64, error)
	// Retry returns rows to pending with a new attempt count and a due time
	// of now + Delay, keeping the error text.
	Retry(ctx context.Context, p RetryParams) (int64, error)
	// Dead moves rows to dead with the reason kept.
	Dead(ctx context.Context, p DeadParams) (int64, error)
	// Release returns rows held by Token to pending without spending an
	// attempt (shutdown, a destination that is down).
	Release(ctx context.Context, p ReleaseParams) (int64, error)
	// ReleaseExpired returns up to Limit processing rows whose lease has
	// expired to pending, and reports how many it moved.
	ReleaseExpired(ctx context.Context, p ReleaseExpiredParams) (int64, error)
}

// ClaimParams are the inputs of Dialect.Claim.
type ClaimParams struct {
	Token string        // fencing token, a UUID chosen by the caller
	Limit int           // the most rows to claim
	Lease time.Duration // lease length from the database's now()
	// Window bounds the candidate scan: when positive, only pending rows
	// whose sequence lies in [start, start + Window) are considered, where
	// start is the sequence of the first due pending row at or after From
	// whose key is not in Skip.
	// A claim that finds every row of its window unclaimable (keys held by
	// batches in flight, waiting out a backoff, held dead) gives up after
	// about Window rows instead of walking the whole backlog. 0 considers
	// every pending row. A dialect that cannot bound its scan may ignore
	// Window and From (the result is then a superset, never wrong).
	Window int
	// From, when not 0, is the lowest sequence a windowed claim's window
	// may start at: the engine sets it past rows that cannot be claimed now
	// (Sweeper). 0 is the front of the table.
	From int64
	// Skip are keys whose rows a windowed claim's window does not start
	// at, nor its next window (Claimed.Next): keys the engine saw holding
	// windows it cannot claim now (a head under a dead relay's lease, a
	// backoff, a held dead row, a row out long at a slow receiver), whose
	// later rows would only fill the windows. Their rows inside a window
	// are still claimed when they are heads. A dialect may ignore it.
	Skip []string
	// Poll marks a claim with no sign of ready rows (the caller's last
	// claim found nothing and nothing woke it). Where claims take turns
	// across relays and another claim holds the turn, a dialect may return
	// no rows at once instead of queuing: that claim starts from the rows
	// the holder leaves, and a poll queued behind it adds a claim statement
	// (often a walk of the window for nothing) to the one queue every
	// relay's claims share. Such a claim returns ErrClaimTurnBusy. A
	// dialect may ignore Poll.
	Poll bool
}

// Claimed is what Sweeper.ClaimNext returns.
type Claimed struct {
	Messages []outbox.Message
	// Start is where the claim's window started (0 with More false: no
	// due row at or after From).
	Start int64
	// Next is the sequence of the first due pending row at or past the
	// end of the claim's window, where the next window would start; More
	// is false when no due pending row lies past the window (or the claim
	// had none).
	Next int64
	More bool
	// Blockers are the keys of the first due pending rows of the window
	// that the claim did not take and whose key was not skipped, when it
	// took fewer rows than asked (at most MaxBlockers, in sequence order,
	// one per row): what holds the window. Fewer than MaxBlockers are all
	// such rows the window has left. Empty when unknown or none.
	Blockers []string
}

// MaxBlockers is the most rows Claimed.Blockers names.
const MaxBlockers = 16

// Sweeper is what a dialect whose claim honours Window and From offers
// beyond Dialect: a claim that also says where the next window starts.
// When a window yields fewer rows than asked while More is true, rows that
// cannot be claimed now fill it, and the engine claims again From Next, so
// that no stuck key keeps the keys behind it waiting (relay/sweep.go).
type Sweeper interface {
	ClaimNext(ctx context.Context, p ClaimParams) (Claimed, error)
}

// ClaimTurnReporter is what a dialect with a claim turn shared by every
// relay on the table (PostgreSQL's, relay.claimTurns: table) offers beyond
// Dialect: after each claim that took the turn, f learns whether that claim
// had to queue for it behind another relay's claim. The engine calls it
// once, before Run.
type ClaimTurnReporter interface {
	OnClaimTurn(f func(queued bool))
}

// ErrClaimTurnBusy is what a poll (ClaimParams.Poll) returns when another
// claim holds the table's claim turn: it did not run, and found nothing.
var ErrClaimTurnBusy = errors.New("claim turn held by another claim; poll skipped")

// RenewParams are the inputs of Dialect.Renew.
type RenewParams struct {
	Token string
	Lease time.Duration
}

// CompleteParams are the inputs of Dialect.Complete.
type CompleteParams struct {
	Token string
	IDs   []string
}

// RetryItem is one row to retry.
type RetryItem struct {
	ID      string
	Attempt int           // the new attempt count
	Delay   time.Duration // due at database now() + Delay
	Error   string        // redacted, truncated reason
}

// RetryParams are the inputs of Dialect.Retry.
type RetryParams struct {
	Token string
	Items []RetryItem
}

// DeadItem is one row to dead-letter.
type DeadItem struct {
	ID      string
	Attempt int
	Error   string
}

// DeadParams are the inputs of Dialect.Dead.
type DeadParams struct {
	Token string
	Items []DeadItem
}

// ReleaseParams are the inputs of Dialect.Release.
type ReleaseParams struct {
	Token string
	IDs   []string
}

// ReleaseExpiredParams are the inputs of Dialect.ReleaseExpired.
type ReleaseExpiredParams struct {
	Limit int
}

// BatchCommitter is implemented by dialects whose claim holds a batch open
// until the engine is done with it: lock mode (docs/adopting.md), where the
// claim locks the rows in a transaction that stays open while the batch is
// published and the settling writes run inside it. The engine calls Commit
// once for every non-empty claimed batch, after its settling writes; the
// dialect commits them, or rolls everything back if any earlier step of the
// batch failed (the rows then stay pending, nothing marked, and are
// delivered again with the same ids). A Commit error means the outcomes
// were not recorded.
type BatchCommitter interface {
	Commit(ctx context.Context, token string) error
}

// ClaimForgetter is implemented by dialects that keep state per claim
// (bucket mode: the rows in flight). The engine calls Forget once every row
// of the claim has an outcome, whether its settlement was written or not:
// a row whose settlement could not be written is still pending, and a
// later claim may take it again.
type ClaimForgetter interface {
	Forget(token string)
}

// BatchDeadliner is implemented by dialects whose batches end at a time
// that renewals do not move (lock mode: the lock timeout rolls the batch's
// transaction back, and then another relay may claim its rows). The
// engine stops a batch's publish before its deadline, as before the end
// of a lease it cannot renew.
type BatchDeadliner interface {
	BatchDeadline(token string) (time.Time, bool)
}
