package outbox

import "time"

// State is the logical state of an outbox row. A table adopted through state
// mapping may store other values; the dialect translates.
type State string

// The states of the contract: pending -> processing -> sent | pending | dead.
const (
	StatePending    State = "pending"
	StateProcessing State = "processing"
	StateSent       State = "sent"
	StateDead       State = "dead"
)

// Message is one outbox row as the relay sees it after a claim.
//
// ID is the message identity on every protocol; it never changes across
// retries or replays. Key is empty when the row has no ordering key.
type Message struct {
	ID            string
	Topic         string
	Key           string
	Payload       []byte
	Headers       map[string]string
	AggregateType string
	Attempt       int
	MaxAttempts   int
	Sequence      int64
	CreatedAt     time.Time
	ScheduledAt   time.Time

	// Malformed is set by a dialect when the stored row cannot be turned
	// into a message (headers that are not a JSON object of strings, a
	// payload that is not JSON). The engine dead-letters such a row at once
	// with this reason instead of delivering it.
	Malformed error
}

// Lease is the claim a relay holds on a batch of rows: the fencing token
// written into every claimed row and the database time at which the lease
// ends unless renewed.
type Lease struct {
	Token     string
	ExpiresAt time.Time
}
