package postgres

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/suggest"
)

// Claim modes (relay.claimMode).
const (
	ModeAuto  = "auto"  // lease when the table can hold a lease, lock otherwise
	ModeLease = "lease" // claim = one UPDATE to processing under a lease (the bundled table)
	ModeLock  = "lock"  // claim = FOR UPDATE SKIP LOCKED in a transaction held while publishing
	// ModeBuckets: relays own buckets of keys; a claim reads, the settlement
	// is the one write (buckets.go).
	ModeBuckets = "buckets"
)

// degradation says what the relay does without an optional column.
var degradation = map[string]string{
	dialect.ColKey:            "no per-key ordering: every row is independent",
	dialect.ColHeaders:        "no row headers are sent",
	dialect.ColAggregateType:  "{{ aggregateType }} is empty; routes whose templates use it are refused at start",
	dialect.ColAttempt:        "attempts are not counted: a row that fails goes dead at once (an unavailable destination still defers without spending an attempt)",
	dialect.ColMaxAttempts:    "every row gets relay.maxAttempts",
	dialect.ColScheduledAt:    "no delayed rows and no retry backoff: a retried row is due again at once",
	dialect.ColCreatedAt:      "the delivery-latency metric starts at the claim",
	dialect.ColUpdatedAt:      "the time a row was settled is not recorded; retention cannot age sent rows (unless sentAt is mapped), dead list shows no time and refuses --since, and replay refuses --since and --until",
	dialect.ColLastError:      "the reason a row failed is only logged, not stored",
	dialect.ColClaimToken:     "no lease: lock mode",
	dialect.ColClaimedAt:      "no lease: lock mode",
	dialect.ColLeaseExpiresAt: "no lease: lock mode",
	dialect.ColHeldAt:         "relay.onDead: hold is not available",
}

// idTypes are the id column types the relay can cast ids to, by
// information_schema data_type.
var idTypes = map[string]string{
	"uuid": "uuid", "bigint": "bigint", "integer": "integer", "smallint": "smallint",
	"text": "text", "character varying": "text", "numeric": "numeric",
}

// TablePlan is how the relay will use an existing table: the mapping with
// the optional columns the table lacks made absent, the claim mode and
// why, the id type, and what is wrong.
type TablePlan struct {
	Mapping dialect.Mapping
	Exists  bool
	Mode    string // ModeLease or ModeLock ("" when the table is unusable)
	Why     string
	IDType  string
	// IDUnique: a valid unique index on the id column alone (a primary key
	// is one); pass it to WithUniqueID.
	IDUnique bool
	// LastErrorLen is the lastError column's maximum length in characters
	// (a VARCHAR(n)); 0 when it has none. Pass it to WithLastErrorLength.
	LastErrorLen int
	Notes        []string                // informational: columns absent and what that changes
	Warnings     []string                // not errors, but a risk or a cost to fix: an id without a unique index, autovacuum off
	Problems     []dialect.SchemaProblem // each one stops check and run
	Advice       []dialect.SchemaProblem // not errors: DDL that would enable more
}

type catalogColumn struct {
	dataType string
	nullable bool
	maxLen   int  // character_maximum_length; 0 when unbounded
	serial   bool // filled from a sequence: a nextval default or an identity column
}

// ResolveTable reads the table's columns from the catalog and decides how
// the relay uses it with mapping m and claim mode mode (auto, lease, lock):
//
//   - a column the mapping names explicitly that the table lacks is a
//     problem naming the column and the fix; so is a missing required
//     column (id, topic, payload, state, sequence) or a mistyped one;
//   - an optional column left at its default name that the table lacks
//     becomes absent, with a note saying what the relay does without it;
//   - auto picks lease mode when the claim columns exist and the state
//     column accepts the processing value, lock mode otherwise.
func ResolveTable(ctx context.Context, pool *pgxpool.Pool, m dialect.Mapping, mode string, hold bool) (TablePlan, error) {
	plan := TablePlan{Mapping: m}
	if mode == "" {
		mode = ModeAuto
	}
	r := newTableCheck(pool, m, &plan)
	if err := r.readColumns(ctx); err != nil {
		return plan, err
	}
	if len(r.cols) == 0 {
		r.missingTable()
		return plan, nil
	}
	plan.Exists = true

	absent := r.checkColumns(hold)
	r.noteNullable()
	if err := r.checkIDUnique(ctx); err != nil {
		return plan, err
	}
	if err := r.checkAutovacuum(ctx); err != nil {
		return plan, err
	}
	if len(absent) > 0 {
		var err error
		if plan.Mapping, err = m.Without(absent...); err != nil {
			return plan, err
		}
	}
	// The state column's CHECK constraints, if any, must accept the mapped
	// values; processing need only be accepted for lease mode.
	allowed, constrained, err := stateCheck(ctx, pool, m, r.args, r.schemaExpr)
	if err != nil {
		return plan, err
	}
	accepts := func(v string) bool { return !constrained || allowed(v) }
	r.checkStateValues(accepts)
	r.chooseMode(mode, accepts)
	return plan, nil
}

// tableCheck is one ResolveTable call: the table as the catalog describes
// it, and the plan its checks fill in.
type tableCheck struct {
	pool       *pgxpool.Pool
	m          dialect.Mapping
	plan       *TablePlan
	table      string // the table's name, quoted for SQL
	plain      string // the table's name as the user wrote it, for messages
	schemaExpr string // the catalog queries' schema: current_schema() or $2
	args       []any  // the catalog queries' arguments: table name (and schema)
	cols       map[string]catalogColumn
}

func newTableCheck(pool *pgxpool.Pool, m dialect.Mapping, plan *TablePlan) *tableCheck {
	r := &tableCheck{
		pool:       pool,
		m:          m,
		plan:       plan,
		table:      m.Table(QuoteIdent),
		plain:      m.Table(func(s string) string { return s }),
		schemaExpr: "current_schema()",
		args:       []any{m.TableName()},
	}
	if m.Schema() != "" {
		r.schemaExpr = "$2"
		r.args = append(r.args, m.Schema())
	}
	return r
}

// readColumns reads the table's columns from information_schema; none
// means the table does not exist or is not visible.
func (r *tableCheck) readColumns(ctx context.Context) error {
	rows, err := r.pool.Query(ctx, `SELECT column_name, data_type, is_nullable = 'YES', COALESCE(character_maximum_length, 0),
		is_identity = 'YES' OR COALESCE(column_default LIKE 'nextval(%', false) FROM information_schema.columns
		WHERE table_name = $1 AND table_schema = `+r.schemaExpr, r.args...)
	if err != nil {
		return interpretError("check schema", err)
	}
	r.cols = map[string]catalogColumn{}
	for rows.Next() {
		var name, typ string
		var nullable, serial bool
		var maxLen int32
		if err := rows.Scan(&name, &typ, &nullable, &maxLen, &serial); err != nil {
			rows.Close()
			return interpretError("check schema", err)
		}
		r.cols[name] = catalogColumn{typ, nullable, int(maxLen), serial}
	}
	if err := rows.Err(); err != nil {
		return interpretError("check schema", err)
	}
	return nil
}

func (r *tableCheck) missingTable() {
	fix := "create it with queuebox migrate up (with the same --config)"
	if r.m.TableName() != dialect.DefaultTable {
		fix = "create the table, or point database.outboxTable at the existing one"
	}
	r.problem(dialect.SchemaProblem{What: fmt.Sprintf("table %s does not exist (or is not visible to this user)", r.plain), Fix: fix})
}

func (r *tableCheck) problem(p dialect.SchemaProblem) {
	r.plan.Problems = append(r.plan.Problems, p)
}

// checkColumns checks each mapped column against the table, in the order
// of the logical names, and returns the optional ones that become absent.
func (r *tableCheck) checkColumns(hold bool) (absent []string) {
	logical := make([]string, 0, len(r.m.Columns()))
	for l := range r.m.Columns() {
		logical = append(logical, l)
	}
	sort.Strings(logical)
	spare := r.unmappedColumns(logical)
	for _, l := range logical {
		phys, _ := r.m.Column(l)
		c, ok := r.cols[phys]
		if !ok {
			if r.missingColumn(l, phys, spare, hold) {
				absent = append(absent, l)
			}
			continue
		}
		r.checkColumnType(l, phys, c)
	}
	return absent
}

// unmappedColumns are the table's columns that nothing maps: a mapped name
// the table lacks is most often a typo of one of them, so they are the
// suggestions.
func (r *tableCheck) unmappedColumns(logical []string) []string {
	mapped := map[string]bool{}
	for _, l := range logical {
		phys, _ := r.m.Column(l)
		mapped[phys] = true
	}
	var spare []string
	for name := range r.cols {
		if !mapped[name] {
			spare = append(spare, name)
		}
	}
	sort.Strings(spare)
	return spare
}

// missingColumn records a mapped column the table lacks: a problem when
// the column is required, named explicitly, part of the bundled table or
// needed by onDead: hold; otherwise it reports true, the column becomes
// absent, and a note says what the relay does without it.
func (r *tableCheck) missingColumn(l, phys string, spare []string, hold bool) bool {
	m := r.m
	addDDL := fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s %s;", r.table, QuoteIdent(phys), columnSpecs[l].ddl)
	switch {
	case m.Explicit(l) && dialect.Required(l):
		r.problem(dialect.SchemaProblem{Column: l,
			What: fmt.Sprintf("database.columns.%s names column %s, which table %s does not have%s", l, phys, r.plain, suggest.DidYouMean(phys, spare)),
			Fix:  fmt.Sprintf("correct the name (%s is required), or %s", l, addDDL)})
	case dialect.Required(l):
		r.problem(dialect.SchemaProblem{Column: l,
			What: fmt.Sprintf("required column %s (%s) is missing%s", phys, l, suggest.DidYouMean(phys, spare)),
			Fix:  r.requiredColumnFix(l) + ", or " + addDDL})
	case m.Explicit(l):
		r.problem(dialect.SchemaProblem{Column: l,
			What: fmt.Sprintf("database.columns.%s names column %s, which table %s does not have%s", l, phys, r.plain, suggest.DidYouMean(phys, spare)),
			Fix:  fmt.Sprintf("correct the name, or declare the column absent with `%s: \"\"` (then: %s), or %s", l, degradation[l], addDDL)})
	case !m.Adopted() && l != dialect.ColHeldAt:
		// The bundled table lacks a column: a migration is missing.
		r.problem(dialect.SchemaProblem{Column: l,
			What: fmt.Sprintf("column %s (%s) is missing", phys, l),
			Fix:  addDDL + " (or queuebox migrate up; to adopt a table of another shape, map its columns: docs/adopting.md)"})
	case l == dialect.ColHeldAt && hold:
		r.problem(dialect.SchemaProblem{Column: l,
			What: fmt.Sprintf("relay.onDead: hold needs column %s (heldAt), which is missing", phys),
			Fix:  addDDL + " (or relay.onDead: release)"})
	default:
		if l != dialect.ColHeldAt {
			r.plan.Notes = append(r.plan.Notes, fmt.Sprintf("column %s (%s) not found: %s", phys, l, degradation[l]))
		}
		return true
	}
	return false
}

// requiredColumnFix says how to map a required column the table lacks;
// for the sequence, an id filled from a sequence serves.
func (r *tableCheck) requiredColumnFix(l string) string {
	fix := fmt.Sprintf("set database.columns.%s to the table's column for %s", l, l)
	if l == dialect.ColSequence {
		fix += " (a monotonic column such as a BIGSERIAL primary key serves: sequence: id)"
		if idCol, _ := r.m.Column(dialect.ColID); r.cols[idCol].serial {
			fix = fmt.Sprintf("set database.columns.sequence to a monotonic column: the id column %s is filled from a sequence, so it serves: sequence: %s", idCol, idCol)
		}
	}
	return fix
}

// checkColumnType checks a column the table has: the id's type (which the
// plan records), each typed column against the types it may have, and the
// lastError column's length limit.
func (r *tableCheck) checkColumnType(l, phys string, c catalogColumn) {
	spec := columnSpecs[l]
	switch {
	case l == dialect.ColID:
		t, known := idTypes[c.dataType]
		if !known {
			r.problem(dialect.SchemaProblem{Column: l,
				What: fmt.Sprintf("column %s (id) has type %s; want uuid, bigint, integer or text", phys, c.dataType),
				Fix:  "map database.columns.id to a unique column of one of those types"})
		}
		r.plan.IDType = t
	case spec.ddl != "" && !slices.Contains(spec.types, c.dataType):
		r.problem(dialect.SchemaProblem{Column: l,
			What: fmt.Sprintf("column %s (%s) has type %s; want %s", phys, l, c.dataType, strings.Join(spec.types, " or ")),
			Fix:  alterTypeFix(r.table, QuoteIdent(phys), c.dataType, spec.ddl)})
	case l == dialect.ColLastError && c.maxLen > 0:
		r.plan.LastErrorLen = c.maxLen
		r.plan.Notes = append(r.plan.Notes, fmt.Sprintf("column %s (lastError) holds at most %d characters: the relay cuts its error texts (up to 1,024 characters) to that length; ALTER TABLE %s ALTER COLUMN %s TYPE TEXT keeps them whole",
			phys, c.maxLen, r.table, QuoteIdent(phys)))
	}
}

// noteNullable notes an id or sequence column that allows NULL. Such a row
// is one the relay cannot handle: it cannot be settled by id, and has no
// place in per-key order. A NULL sequence makes the row malformed
// (dead-lettered with the reason), a NULL id keeps it out of every batch
// (scanRows); the note says how to rule them out, without refusing a
// table that has none.
func (r *tableCheck) noteNullable() {
	for _, l := range []string{dialect.ColID, dialect.ColSequence} {
		phys, _ := r.m.Column(l)
		if c, ok := r.cols[phys]; ok && c.nullable {
			r.plan.Notes = append(r.plan.Notes, fmt.Sprintf("column %s (%s) allows NULL; a row whose %s is NULL %s: ALTER TABLE %s ALTER COLUMN %s SET NOT NULL;",
				phys, l, l, nullConsequence[l], r.table, QuoteIdent(phys)))
		}
	}
}

// checkIDUnique warns when the id column has no unique index. The claim
// reaches rows by id, every later write is fenced on it, and JetStream
// deduplicates on it (Nats-Msg-Id): rows that share an id would be
// claimed, settled and deduplicated as one message. Only a unique index on
// the id alone (not partial) rules that out.
func (r *tableCheck) checkIDUnique(ctx context.Context) error {
	idCol, _ := r.m.Column(dialect.ColID)
	if _, ok := r.cols[idCol]; !ok {
		return nil
	}
	unique, err := idIsUnique(ctx, r.pool, idCol, r.args, r.schemaExpr)
	if err != nil {
		return err
	}
	r.plan.IDUnique = unique
	if !unique {
		r.plan.Warnings = append(r.plan.Warnings, fmt.Sprintf("column %s (id) has no unique index; rows that share an id are claimed, settled and deduplicated as one message: CREATE UNIQUE INDEX ON %s (%s); (or, on a table without a primary key, ALTER TABLE %s ADD PRIMARY KEY (%s);)",
			idCol, r.table, QuoteIdent(idCol), r.table, QuoteIdent(idCol)))
	}
	return nil
}

// checkAutovacuum warns when autovacuum is off for the table or the
// server. Every claim steps over the index entries of the rows claimed
// since the table's last vacuum; without autovacuum they pile up for as
// long as the relay runs, and so does the cost of each claim.
func (r *tableCheck) checkAutovacuum(ctx context.Context) error {
	serverOff, tableOff, err := autovacuumOff(ctx, r.pool, r.args, r.schemaExpr)
	if err != nil {
		return err
	}
	if tableOff {
		r.plan.Warnings = append(r.plan.Warnings, fmt.Sprintf("autovacuum is off for table %s (autovacuum_enabled = false); claims slow down as the dead row versions of delivered rows pile up and the statistics go stale (docs/operations.md, \"Vacuum\"): ALTER TABLE %s RESET (autovacuum_enabled);", r.plain, r.table))
	}
	if serverOff {
		r.plan.Warnings = append(r.plan.Warnings, "autovacuum is off on this server (autovacuum = off); claims slow down as the dead row versions of delivered rows pile up and the statistics go stale (docs/operations.md, \"Vacuum\"): ALTER SYSTEM SET autovacuum = on; SELECT pg_reload_conf();, or VACUUM (ANALYZE) the table on a schedule")
	}
	return nil
}

// checkStateValues refuses mapped pending, sent and dead values that the
// state column's CHECK constraint does not accept.
func (r *tableCheck) checkStateValues(accepts func(string) bool) {
	stateCol, _ := r.m.Column(dialect.ColState)
	for _, s := range []outbox.State{outbox.StatePending, outbox.StateSent, outbox.StateDead} {
		v := r.m.State(s)
		if !accepts(v) {
			r.problem(dialect.SchemaProblem{Column: dialect.ColState,
				What: fmt.Sprintf("the CHECK constraint on column %s does not accept %q, the value for state %s", stateCol, v, s),
				Fix:  fmt.Sprintf("set database.states.%s to the value the table uses for %s", s, s)})
		}
	}
}

// chooseMode sets the plan's claim mode and why: lock when asked, lease
// when the table can hold a lease, and otherwise lock under auto and a
// problem under lease. When the table cannot hold a lease, the advice
// gives the DDL that would let it.
func (r *tableCheck) chooseMode(mode string, accepts func(string) bool) {
	plan := r.plan
	pm := plan.Mapping
	var missing []string
	for _, l := range dialect.LeaseColumns {
		if !pm.Has(l) {
			missing = append(missing, l)
		}
	}
	processingOK := pm.HasState(outbox.StateProcessing) && accepts(pm.State(outbox.StateProcessing))
	noLease := r.noLeaseReason(missing, processingOK)
	switch {
	case mode == ModeBuckets:
		plan.Mode, plan.Why = ModeBuckets, "relay.claimMode: buckets"
		return
	case mode == ModeLock:
		plan.Mode, plan.Why = ModeLock, "relay.claimMode: lock"
	case noLease == "":
		plan.Mode, plan.Why = ModeLease, "the table has the lease columns and a processing state value"
		if mode == ModeLease {
			plan.Why = "relay.claimMode: lease; " + plan.Why
		}
	case mode == ModeLease:
		r.problem(dialect.SchemaProblem{
			What: "relay.claimMode: lease, but " + noLease,
			Fix:  "add what is missing (see the DDL below), or use relay.claimMode: lock (or auto)"})
	default:
		plan.Mode, plan.Why = ModeLock, noLease
	}
	if noLease != "" {
		r.leaseAdvice(missing, processingOK)
	}
}

// noLeaseReason says why the table cannot hold a lease ("" when it can):
// the lease columns it lacks, or a processing value it cannot store.
func (r *tableCheck) noLeaseReason(missing []string, processingOK bool) string {
	pm := r.plan.Mapping
	stateCol, _ := r.m.Column(dialect.ColState)
	switch {
	case len(missing) > 0 && !processingOK:
		return fmt.Sprintf("the table has no lease columns (%s) and no processing state value", strings.Join(missing, ", "))
	case len(missing) > 0:
		return fmt.Sprintf("the table has no lease columns (%s)", strings.Join(missing, ", "))
	case !processingOK && !pm.HasState(outbox.StateProcessing):
		return "database.states.processing is declared absent"
	case !processingOK:
		return fmt.Sprintf("the CHECK constraint on column %s does not accept the processing value %q", stateCol, pm.State(outbox.StateProcessing))
	}
	return ""
}

// leaseAdvice gives the DDL for each missing lease column and the state
// value lease mode needs.
func (r *tableCheck) leaseAdvice(missing []string, processingOK bool) {
	for _, l := range missing {
		phys, ok := r.m.Column(l)
		if !ok {
			phys = defaultPhysical(l)
		}
		r.plan.Advice = append(r.plan.Advice, dialect.SchemaProblem{Column: l,
			What: fmt.Sprintf("lease mode needs column %s (%s)", phys, l),
			Fix:  fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s %s;", r.table, QuoteIdent(phys), columnSpecs[l].ddl)})
	}
	if !processingOK {
		stateCol, _ := r.m.Column(dialect.ColState)
		v := r.plan.Mapping.State(outbox.StateProcessing)
		if v == "" {
			v = string(outbox.StateProcessing)
		}
		r.plan.Advice = append(r.plan.Advice, dialect.SchemaProblem{Column: dialect.ColState,
			What: "lease mode needs a processing state value the state column accepts",
			Fix:  fmt.Sprintf("allow %s in column %s (widen its CHECK constraint) and set database.states.processing: %s", quoteLiteral(v), stateCol, v)})
	}
}

// autovacuumOff reports whether the server's autovacuum setting is off, and
// whether the table's own autovacuum_enabled option is false.
func autovacuumOff(ctx context.Context, pool *pgxpool.Pool, args []any, schemaExpr string) (server, table bool, err error) {
	err = pool.QueryRow(ctx, `SELECT NOT current_setting('autovacuum')::boolean,
		       COALESCE((SELECT NOT o.option_value::boolean
		                 FROM pg_class AS t
		                 JOIN pg_namespace AS n ON n.oid = t.relnamespace,
		                      pg_options_to_table(t.reloptions) AS o
		                 WHERE t.relname = $1 AND n.nspname = `+schemaExpr+`
		                   AND o.option_name = 'autovacuum_enabled'), false)`, args...).Scan(&server, &table)
	if err != nil {
		return false, false, interpretError("check schema", err)
	}
	return server, table, nil
}

// idIsUnique reports whether a valid, unique, non-partial index has the id
// column as its only key column (a primary key is one), under the equality
// that the claim's join on id uses. An index that an interrupted CREATE
// INDEX CONCURRENTLY left invalid does not count, nor one with another
// collation than the column's (a unique index on id COLLATE "C" lets 'ab'
// and 'AB' coexist where a case-insensitive column's join finds both) or
// another operator class than the type's default.
func idIsUnique(ctx context.Context, pool *pgxpool.Pool, idCol string, args []any, schemaExpr string) (bool, error) {
	var unique bool
	err := pool.QueryRow(ctx, `SELECT EXISTS (
		SELECT 1
		FROM pg_index AS i
		JOIN pg_class AS t ON t.oid = i.indrelid
		JOIN pg_namespace AS n ON n.oid = t.relnamespace
		JOIN pg_attribute AS a ON a.attrelid = t.oid AND a.attnum = i.indkey[0]
		WHERE t.relname = $1 AND n.nspname = `+schemaExpr+`
		  AND i.indisunique AND i.indisvalid AND i.indpred IS NULL AND i.indnkeyatts = 1
		  -- unique under the equality the claim joins on: the column's
		  -- collation and the type's default operator class
		  AND i.indcollation[0] = a.attcollation
		  AND EXISTS (SELECT 1 FROM pg_opclass AS oc JOIN pg_am AS am ON am.oid = oc.opcmethod
		              WHERE oc.oid = i.indclass[0] AND oc.opcdefault AND am.amname = 'btree')
		  AND a.attname = $`+fmt.Sprint(len(args)+1)+`)`, append(slices.Clone(args), idCol)...).Scan(&unique)
	if err != nil {
		return false, interpretError("check schema", err)
	}
	return unique, nil
}

// nullConsequence is what happens to a row whose id or sequence is NULL.
var nullConsequence = map[string]string{
	dialect.ColID:       "is never delivered (lease mode never claims it; lock mode leaves it out of every batch)",
	dialect.ColSequence: "is dead-lettered as malformed",
}

func defaultPhysical(logical string) string {
	m := dialect.DefaultMapping()
	c, _ := m.Column(logical)
	return c
}

// stateCheck reads the CHECK constraints on the state column and returns a
// function telling whether a value appears among their literals
// (constrained is false when there is none).
func stateCheck(ctx context.Context, pool *pgxpool.Pool, m dialect.Mapping, args []any, schemaExpr string) (func(string) bool, bool, error) {
	stateCol, _ := m.Column(dialect.ColState)
	q := `SELECT pg_get_constraintdef(c.oid)
		FROM pg_constraint c
		JOIN pg_class t ON t.oid = c.conrelid
		JOIN pg_namespace n ON n.oid = t.relnamespace
		JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = ANY(c.conkey)
		WHERE c.contype = 'c' AND t.relname = $1 AND n.nspname = ` + schemaExpr + ` AND a.attname = $` + fmt.Sprint(len(args)+1)
	rows, err := pool.Query(ctx, q, append(args, stateCol)...)
	if err != nil {
		return nil, false, interpretError("check constraints", err)
	}
	var defs []string
	for rows.Next() {
		var def string
		if err := rows.Scan(&def); err != nil {
			rows.Close()
			return nil, false, interpretError("check constraints", err)
		}
		if strings.Contains(def, "'") { // a list of values, not, say, a length check
			defs = append(defs, def)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, false, interpretError("check constraints", err)
	}
	allowed := func(v string) bool {
		for _, d := range defs {
			if !strings.Contains(d, quoteLiteral(v)) {
				return false
			}
		}
		return true
	}
	return allowed, len(defs) > 0, nil
}

// alterTypeFix is the statement that converts column col (quoted) of table
// from type from to the type of ddl (a columnSpecs DDL). A serial type is
// no type to convert to (BIGSERIAL is BIGINT with a sequence as default),
// and bytea has no cast to text or JSON: its bytes are read as UTF-8.
func alterTypeFix(table, col, from, ddl string) string {
	to := strings.Fields(ddl)[0]
	if to == "BIGSERIAL" {
		to = "BIGINT"
	}
	using := col + "::" + to
	if from == "bytea" {
		using = "convert_from(" + col + ", 'UTF8')::" + to
	}
	return fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s TYPE %s USING %s;", table, col, to, using)
}
