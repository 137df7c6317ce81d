package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

var _ dialect.SchemaChecker = (*Dialect)(nil)

// columnSpec is what a logical column needs: the data types it may have
// (information_schema data_type) and the definition that adds it.
type columnSpec struct {
	types []string
	ddl   string // type, default and nullability for ALTER TABLE ADD COLUMN
}

var columnSpecs = map[string]columnSpec{
	dialect.ColID:             {[]string{"uuid"}, "UUID NOT NULL DEFAULT gen_random_uuid()"},
	dialect.ColTopic:          {[]string{"character varying", "text"}, "VARCHAR(255) NOT NULL"},
	dialect.ColKey:            {[]string{"character varying", "text"}, "VARCHAR(255)"},
	dialect.ColPayload:        {[]string{"jsonb", "json"}, "JSONB NOT NULL"},
	dialect.ColHeaders:        {[]string{"jsonb", "json"}, "JSONB NOT NULL DEFAULT '{}'"},
	dialect.ColAggregateType:  {[]string{"character varying", "text"}, "VARCHAR(255)"},
	dialect.ColState:          {[]string{"character varying", "text"}, "VARCHAR(50) NOT NULL DEFAULT 'pending'"},
	dialect.ColAttempt:        {[]string{"integer", "smallint", "bigint"}, "INTEGER NOT NULL DEFAULT 0"},
	dialect.ColMaxAttempts:    {[]string{"integer", "smallint", "bigint"}, "INTEGER NOT NULL DEFAULT 5"},
	dialect.ColScheduledAt:    {[]string{"timestamp with time zone"}, "TIMESTAMPTZ NOT NULL DEFAULT now()"},
	dialect.ColCreatedAt:      {[]string{"timestamp with time zone"}, "TIMESTAMPTZ NOT NULL DEFAULT now()"},
	dialect.ColUpdatedAt:      {[]string{"timestamp with time zone"}, "TIMESTAMPTZ NOT NULL DEFAULT now()"},
	dialect.ColClaimedAt:      {[]string{"timestamp with time zone"}, "TIMESTAMPTZ"},
	dialect.ColClaimToken:     {[]string{"uuid"}, "UUID"},
	dialect.ColLeaseExpiresAt: {[]string{"timestamp with time zone"}, "TIMESTAMPTZ"},
	dialect.ColLastError:      {[]string{"text", "character varying"}, "TEXT"},
	dialect.ColSequence:       {[]string{"bigint", "integer"}, "BIGSERIAL"},
	dialect.ColSentAt:         {[]string{"timestamp with time zone"}, "TIMESTAMPTZ"},
	dialect.ColHeldAt:         {[]string{"timestamp with time zone"}, "TIMESTAMPTZ"},
}

// indexSpec is an index the claim or the reaper relies on.
type indexSpec struct {
	name    string
	columns []string // logical, leading columns
	where   string   // predicate over logical columns and states, rendered
	why     string
}

// CheckSchema implements dialect.SchemaChecker: it reads the table's
// columns and indexes from the catalog and compares them with the mapping.
func (d *Dialect) CheckSchema(ctx context.Context) (dialect.SchemaReport, error) {
	m := d.mapping
	rep := dialect.SchemaReport{Table: m.Table(func(s string) string { return s })}
	mode := ModeLease
	switch {
	case d.opts.lock:
		mode = ModeLock
	case d.opts.buckets:
		mode = ModeBuckets
	}
	plan, err := ResolveTable(ctx, d.pool, m, mode, d.opts.hold)
	if err != nil {
		return rep, err
	}
	rep.TableExists, rep.Problems, rep.Advice, rep.Notes = plan.Exists, plan.Problems, plan.Advice, plan.Notes
	rep.Mode, rep.ModeReason = plan.Mode, plan.Why
	if len(rep.Problems) > 0 {
		return rep, nil
	}
	missing, err := d.MissingIndexes(ctx)
	if err != nil {
		return rep, err
	}
	rep.Warnings = missing
	return rep, nil
}

// MissingIndexes returns, with the DDL that creates it, each index the
// claim, the head-of-key probe and the reaper rely on that the table lacks.
// Without one the statement scans the table, every time: `queuebox check`
// and the relay's start warn about it.
func (d *Dialect) MissingIndexes(ctx context.Context) ([]dialect.SchemaProblem, error) {
	m := d.mapping
	schemaExpr := "current_schema()"
	args := []any{m.TableName()}
	if m.Schema() != "" {
		schemaExpr = "$2"
		args = append(args, m.Schema())
	}
	return d.missingIndexes(ctx, args, schemaExpr)
}

// missingIndexes returns advice for each index the claim and the reaper
// rely on that the table lacks (matched on its leading columns).
func (d *Dialect) missingIndexes(ctx context.Context, args []any, schemaExpr string) ([]dialect.SchemaProblem, error) {
	m := d.mapping
	col := func(l string) string { c, _ := m.Column(l); return c }
	st := func(s string) string { return quoteLiteral(m.State(outbox.State(s))) }
	specs := []indexSpec{
		{"claim", []string{col(dialect.ColSequence)}, fmt.Sprintf("%s = %s", QuoteIdent(col(dialect.ColState)), st("pending")),
			"the claim's ordered scan of pending rows"},
	}
	if m.Has(dialect.ColKey) {
		// The head-of-key probe reads the key's pending rows (lease mode:
		// and processing rows). Rows without a key are never probed (key =
		// key is not true for NULL): leaving them out saves an index write
		// per unkeyed row (migration 00003).
		states := fmt.Sprintf("%s IN (%s, %s)", QuoteIdent(col(dialect.ColState)), st("pending"), st("processing"))
		if d.opts.lock {
			states = fmt.Sprintf("%s = %s", QuoteIdent(col(dialect.ColState)), st("pending"))
		}
		specs = append(specs, indexSpec{"key_sequence", []string{col(dialect.ColKey), col(dialect.ColSequence)},
			states + " AND " + QuoteIdent(col(dialect.ColKey)) + " IS NOT NULL", "the head-of-key probe"})
	}
	if !d.opts.lock {
		specs = append(specs, indexSpec{"processing", []string{col(dialect.ColClaimedAt)}, fmt.Sprintf("%s = %s", QuoteIdent(col(dialect.ColState)), st("processing")),
			"the expired-lease reaper"})
	}
	rows, err := d.pool.Query(ctx, `
		SELECT array_agg(a.attname::text ORDER BY k.ord)
		FROM pg_index i
		JOIN pg_class t ON t.oid = i.indrelid
		JOIN pg_namespace n ON n.oid = t.relnamespace
		CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum
		WHERE t.relname = $1 AND n.nspname = `+schemaExpr+`
		GROUP BY i.indexrelid`, args...)
	if err != nil {
		return nil, interpretError("check indexes", err)
	}
	var indexes [][]string
	for rows.Next() {
		var cols []string
		if err := rows.Scan(&cols); err != nil {
			rows.Close()
			return nil, interpretError("check indexes", err)
		}
		indexes = append(indexes, cols)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("check indexes", err)
	}
	var out []dialect.SchemaProblem
	for _, s := range specs {
		found := false
		for _, ix := range indexes {
			if len(ix) >= len(s.columns) && equal(ix[:len(s.columns)], s.columns) {
				found = true
				break
			}
		}
		if !found {
			quoted := make([]string, len(s.columns))
			for i, c := range s.columns {
				quoted[i] = QuoteIdent(c)
			}
			out = append(out, dialect.SchemaProblem{
				What: fmt.Sprintf("no index on (%s) for %s: the claim will scan the table", strings.Join(s.columns, ", "), s.why),
				Fix: fmt.Sprintf("CREATE INDEX CONCURRENTLY %s ON %s (%s) WHERE %s;", QuoteIdent(m.TableName()+"_"+s.name+"_idx"),
					m.Table(QuoteIdent), strings.Join(quoted, ", "), s.where),
			})
		}
	}
	return out, nil
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
