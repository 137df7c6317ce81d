package dialect

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/queuebox/queuebox/outbox"
)

// Logical column names: the names the relay uses for the columns of the
// outbox table, whatever the physical table calls them.
const (
	ColID             = "id"
	ColTopic          = "topic"
	ColKey            = "key"
	ColPayload        = "payload"
	ColHeaders        = "headers"
	ColAggregateType  = "aggregateType"
	ColState          = "state"
	ColAttempt        = "attempt"
	ColMaxAttempts    = "maxAttempts"
	ColScheduledAt    = "scheduledAt"
	ColCreatedAt      = "createdAt"
	ColUpdatedAt      = "updatedAt"
	ColClaimedAt      = "claimedAt"
	ColClaimToken     = "claimToken"
	ColLeaseExpiresAt = "leaseExpiresAt"
	ColLastError      = "lastError"
	ColSequence       = "sequence"
	ColSentAt         = "sentAt" // optional: not in the bundled table
	// ColHeldAt marks a dead row that holds its key (relay.onDead: hold):
	// set when the row dies under hold, cleared by `queuebox dead release`
	// and by replay. Only SQL rendered for hold mode reads or writes it, so
	// an existing table needs the column only to use hold.
	ColHeldAt = "heldAt"
)

// defaultColumns is the bundled table's physical name of every logical
// column it has. sentAt is optional and absent by default.
var defaultColumns = map[string]string{
	ColID:             "id",
	ColTopic:          "topic",
	ColKey:            "key",
	ColPayload:        "payload",
	ColHeaders:        "headers",
	ColAggregateType:  "aggregate_type",
	ColState:          "state",
	ColAttempt:        "attempt",
	ColMaxAttempts:    "max_attempts",
	ColScheduledAt:    "scheduled_at",
	ColCreatedAt:      "created_at",
	ColUpdatedAt:      "updated_at",
	ColClaimedAt:      "claimed_at",
	ColClaimToken:     "claim_token",
	ColLeaseExpiresAt: "lease_expires_at",
	ColLastError:      "last_error",
	ColSequence:       "sequence",
	ColHeldAt:         "held_at",
}

// optionalColumns are logical columns a mapping may leave out.
var optionalColumns = map[string]bool{ColSentAt: true}

// requiredColumns are the logical columns no table can do without: a
// mapping may rename them but not declare them absent. Every other column
// may be absent (mapped to "" in database.columns); see Absent and
// docs/adopting.md for what the relay does without each.
var requiredColumns = map[string]bool{ColID: true, ColTopic: true, ColPayload: true, ColState: true, ColSequence: true}

// Required reports whether a logical column must exist in every table.
func Required(logical string) bool { return requiredColumns[logical] }

// LeaseColumns are the columns lease mode needs besides a processing state.
var LeaseColumns = []string{ColClaimToken, ColClaimedAt, ColLeaseExpiresAt}

// DefaultTable is the bundled table's name.
const DefaultTable = "outbox"

// QuoteFunc quotes one identifier part for a database: "x" for PostgreSQL,
// [x] for SQL Server. It receives a validated plain identifier.
type QuoteFunc func(ident string) string

// Mapping says where the outbox lives: the table (optionally
// schema-qualified), the physical name of every logical column and the value
// stored for every logical state. Names in a Mapping are validated plain
// identifiers; dialects still quote them, so reserved words ("order",
// "user", "key") work as column names.
//
// The zero Mapping is not usable; start from DefaultMapping or NewMapping.
type Mapping struct {
	schema  string            // "" when the table is unqualified
	table   string            // table name
	columns map[string]string // logical -> physical
	states  map[outbox.State]string
	// explicit holds the logical columns and states the configuration
	// named (renamed or declared absent), as opposed to defaults.
	explicit map[string]bool
	absent   map[string]bool // logical columns declared absent
}

// DefaultMapping is the bundled table: outbox with the contract's columns and
// states.
func DefaultMapping() Mapping {
	m, err := NewMapping("", nil, nil)
	if err != nil {
		panic("dialect: default mapping is invalid: " + err.Error()) // a bug, not input
	}
	return m
}

// NewMapping builds a Mapping from the config's database.outboxTable,
// database.columns and database.states, each overriding the defaults. An
// empty table means outbox. Every name must be a plain identifier
// ([A-Za-z_][A-Za-z0-9_$]*, the table optionally as schema.table); anything
// else, an unknown logical name, an empty or duplicate state value, or two
// logical columns on one physical column, is an error.
func NewMapping(table string, columns, states map[string]string) (Mapping, error) {
	m := Mapping{
		explicit: map[string]bool{},
		absent:   map[string]bool{},
		columns:  make(map[string]string, len(defaultColumns)+1),
		states: map[outbox.State]string{
			outbox.StatePending:    string(outbox.StatePending),
			outbox.StateProcessing: string(outbox.StateProcessing),
			outbox.StateSent:       string(outbox.StateSent),
			outbox.StateDead:       string(outbox.StateDead),
		},
	}
	if table == "" {
		table = DefaultTable
	}
	parts := strings.Split(table, ".")
	if len(parts) > 2 {
		return Mapping{}, fmt.Errorf("outboxTable %q: want table or schema.table", table)
	}
	for _, p := range parts {
		if err := validIdent(p); err != nil {
			return Mapping{}, fmt.Errorf("outboxTable %q: %w", table, err)
		}
	}
	if len(parts) == 2 {
		m.schema, m.table = parts[0], parts[1]
	} else {
		m.table = parts[0]
	}

	for k, v := range defaultColumns {
		m.columns[k] = v
	}
	for _, logical := range sortedKeys(columns) {
		physical := columns[logical]
		if _, known := defaultColumns[logical]; !known && !optionalColumns[logical] {
			return Mapping{}, fmt.Errorf("columns: unknown logical column %q (known: %s)", logical, strings.Join(logicalColumns(), ", "))
		}
		m.explicit[logical] = true
		if physical == "" || physical == "~" {
			// Declared absent: the table has no such column.
			if requiredColumns[logical] {
				return Mapping{}, fmt.Errorf("columns.%s: the relay cannot work without its %s column; map it to an existing column%s", logical, logical, requiredHint(logical))
			}
			delete(m.columns, logical)
			m.absent[logical] = true
			continue
		}
		if err := validIdent(physical); err != nil {
			return Mapping{}, fmt.Errorf("columns.%s: %w", logical, err)
		}
		m.columns[logical] = physical
	}
	seen := make(map[string]string, len(m.columns))
	for _, logical := range sortedKeys(m.columns) {
		physical := strings.ToLower(m.columns[logical])
		if other, dup := seen[physical]; dup && !(other == ColID && logical == ColSequence) {
			// (a monotonic id may serve as the sequence too: sequence: id)
			return Mapping{}, fmt.Errorf("columns: %s and %s both map to column %q", other, logical, m.columns[logical])
		}
		seen[physical] = logical
	}

	known := []string{string(outbox.StatePending), string(outbox.StateProcessing), string(outbox.StateSent), string(outbox.StateDead)}
	for _, logical := range sortedKeys(states) {
		value := states[logical]
		s := outbox.State(logical)
		if _, ok := m.states[s]; !ok {
			return Mapping{}, fmt.Errorf("states: unknown state %q (known: %s)", logical, strings.Join(known, ", "))
		}
		m.explicit["state:"+logical] = true
		if value == "" && s == outbox.StateProcessing {
			// The table has no processing value (a CHECK constraint, say):
			// only lock mode can claim its rows.
			m.states[s] = ""
			continue
		}
		if value == "" || strings.ContainsRune(value, 0) || len(value) > 255 {
			return Mapping{}, fmt.Errorf("states.%s: %q is not a usable stored value", logical, value)
		}
		m.states[s] = value
	}
	values := make(map[string]outbox.State, 4)
	for _, s := range []outbox.State{outbox.StatePending, outbox.StateProcessing, outbox.StateSent, outbox.StateDead} {
		if m.states[s] == "" {
			continue
		}
		if other, dup := values[m.states[s]]; dup {
			return Mapping{}, fmt.Errorf("states: %s and %s both stored as %q", other, s, m.states[s])
		}
		values[m.states[s]] = s
	}
	return m, nil
}

func requiredHint(logical string) string {
	if logical == ColSequence {
		return " (a monotonic column such as a BIGSERIAL id serves: sequence: id)"
	}
	return ""
}

// Explicit reports whether the configuration named the logical column
// (renamed it or declared it absent), as opposed to taking the bundled
// table's default name.
func (m Mapping) Explicit(logical string) bool { return m.explicit[logical] }

// Adopted reports whether the mapping describes an existing table of
// another shape (a table name other than outbox, or any column or state
// named), as opposed to the bundled table, which must have every column.
func (m Mapping) Adopted() bool { return m.table != DefaultTable || len(m.explicit) > 0 }

// ExplicitState reports whether the configuration named the state's value.
func (m Mapping) ExplicitState(s outbox.State) bool { return m.explicit["state:"+string(s)] }

// Absent reports whether the logical column was declared absent.
func (m Mapping) Absent(logical string) bool { return m.absent[logical] }

// HasState reports whether the table has a value for the state (only
// processing may be absent).
func (m Mapping) HasState(s outbox.State) bool { return m.states[s] != "" }

// Without returns a copy of m in which the given optional logical columns
// are absent, for a table found at start to lack them. Required columns
// are refused.
func (m Mapping) Without(logical ...string) (Mapping, error) {
	out := m
	out.columns = m.Columns()
	out.absent = make(map[string]bool, len(m.absent)+len(logical))
	for k, v := range m.absent {
		out.absent[k] = v
	}
	for _, l := range logical {
		if requiredColumns[l] {
			return Mapping{}, fmt.Errorf("column %s is required", l)
		}
		delete(out.columns, l)
		out.absent[l] = true
	}
	return out, nil
}

// Schema is the table's schema, or "" when the table name is unqualified
// (resolved through the connection's search path or default schema).
func (m Mapping) Schema() string { return m.schema }

// TableName is the table's name without its schema.
func (m Mapping) TableName() string { return m.table }

// Table returns the table name, schema-qualified if configured so, quoted
// with quote.
func (m Mapping) Table(quote QuoteFunc) string {
	if m.schema != "" {
		return quote(m.schema) + "." + quote(m.table)
	}
	return quote(m.table)
}

// Has reports whether the logical column is mapped to a physical one.
func (m Mapping) Has(logical string) bool {
	_, ok := m.columns[logical]
	return ok
}

// Column returns the physical name of a logical column, unquoted, and
// whether it is mapped.
func (m Mapping) Column(logical string) (string, bool) {
	c, ok := m.columns[logical]
	return c, ok
}

// Columns returns a copy of the logical -> physical column map.
func (m Mapping) Columns() map[string]string {
	out := make(map[string]string, len(m.columns))
	for k, v := range m.columns {
		out[k] = v
	}
	return out
}

// State returns the value stored for a logical state.
func (m Mapping) State(s outbox.State) string { return m.states[s] }

// StateValues returns the stored values of the mapped states, in the order
// pending, processing, sent, dead; a state the table has no value for
// (processing: ~) is left out.
func (m Mapping) StateValues() []string {
	var out []string
	for _, s := range []outbox.State{outbox.StatePending, outbox.StateProcessing, outbox.StateSent, outbox.StateDead} {
		if v := m.states[s]; v != "" {
			out = append(out, v)
		}
	}
	return out
}

// LogicalColumns lists every logical column name a mapping accepts, sorted.
func LogicalColumns() []string { return logicalColumns() }

func logicalColumns() []string {
	out := make([]string, 0, len(defaultColumns)+len(optionalColumns))
	for k := range defaultColumns {
		out = append(out, k)
	}
	for k := range optionalColumns {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]*$`)

// MaxIdentLen is the longest identifier any supported database keeps
// intact (SQL Server's 128); a dialect may check a lower limit of its own
// (PostgreSQL's 63 bytes).
const MaxIdentLen = 128

func validIdent(s string) error {
	if !identRE.MatchString(s) {
		return fmt.Errorf("%q is not a plain identifier (letters, digits, _ and $, not starting with a digit)", s)
	}
	if len(s) > MaxIdentLen {
		return fmt.Errorf("identifier %q is longer than %d characters", s, MaxIdentLen)
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// QueryNames returns the names of the queries of the delivery path and of
// the operator surface (Inspector, KeyReleaser, Purger), sorted. Every dialect defines exactly this set (one embedded .sql file each), so
// that the SQL of PostgreSQL and SQL Server can be read side by side; each
// dialect's tests check it.
func QueryNames() []string {
	return []string{
		"claim", "complete", "dead", "dead_list", "dead_release", "purge", "release", "release_expired",
		"renew", "replay", "replay_select", "replay_topics", "retry", "stats_backlog", "stats_counts", "stats_held_keys",
	}
}
