package dialect

import "context"

// SchemaChecker is implemented by dialects that can compare the live table
// with what the mapping needs (queuebox check).
type SchemaChecker interface {
	CheckSchema(ctx context.Context) (SchemaReport, error)
}

// SchemaReport is what CheckSchema found.
type SchemaReport struct {
	Table       string          // the table as configured (schema-qualified when it is)
	TableExists bool            //
	Problems    []SchemaProblem // empty when the table can be relayed as mapped
	Advice      []SchemaProblem // not errors: columns that would enable more (lease mode)
	Warnings    []SchemaProblem // not errors, but costly: indexes the claim relies on that are missing
	// Mode is the claim mode the relay will use ("lease" or "lock"; "" when
	// the dialect has only one), and ModeReason why.
	Mode       string
	ModeReason string
	// Notes are informational: optional columns the table lacks and what
	// the relay does without them.
	Notes []string
}

// SchemaProblem is one thing the table lacks, with the statement that would
// fix it.
type SchemaProblem struct {
	Column string // logical column, or "" for a table-level problem
	What   string // what is wrong, in words
	Fix    string // the DDL that would fix it, or the command to run
}
