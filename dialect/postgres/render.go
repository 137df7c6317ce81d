package postgres

import (
	_ "embed"
	"fmt"
	"text/template"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

// leaseOnly are the queries of lease mode's delivery path; lock mode
// (NewLockMode) renders sql/lock/ in their place.
var leaseOnly = map[string]bool{
	"claim": true, "complete": true, "dead": true, "release": true,
	"release_expired": true, "renew": true, "retry": true,
}

// WithIDType sets the SQL type of the table's id column (uuid, bigint,
// integer, text ...), as resolved from the catalog (ResolveTable). Ids
// always travel as text; the statements cast the parameter arrays to this
// type ($2::text[]::bigint[]) so that the comparison keeps using the
// primary key's index. The default is uuid, the bundled table's type.
func WithIDType(typ string) Option { return func(o *options) { o.idType = typ } }

// templateFuncs are the functions every .sql template may use, for one
// mapping:
//
//	col "x"    the quoted physical column of logical column x (an error if absent)
//	has "x"    whether logical column x exists in the table
//	state "s"  the quoted stored value of logical state s (NULL for an absent
//	           processing value: it matches no row)
//	ids "$n"   parameter $n, a text array, cast to an array of the id type
//	idType     the id column's SQL type
//	alias "c"  the argument of the shared templates (head_of_key.tmpl) for
//	           table alias c
func templateFuncs(m dialect.Mapping, o options) template.FuncMap {
	idType := o.idType
	if idType == "" {
		idType = "uuid"
	}
	return template.FuncMap{
		"col": func(logical string) (string, error) {
			c, ok := m.Column(logical)
			if !ok {
				return "", fmt.Errorf("column %q is not mapped", logical)
			}
			return QuoteIdent(c), nil
		},
		"has": m.Has,
		"state": func(s string) (string, error) {
			st := outbox.State(s)
			switch st {
			case outbox.StatePending, outbox.StateProcessing, outbox.StateSent, outbox.StateDead:
			default:
				return "", fmt.Errorf("unknown state %q", s)
			}
			v := m.State(st)
			if v == "" {
				return "NULL", nil
			}
			return quoteLiteral(v), nil
		},
		"ids":    func(param string) string { return param + "::text[]::" + idType + "[]" },
		"idType": func() string { return idType },
		"alias": func(a string) partialArgs {
			return partialArgs{A: a, Table: m.Table(QuoteIdent), Hold: o.hold}
		},
	}
}

// partialArgs are what a shared template sees: the alias of the row it is
// about, the quoted table and the hold mode.
type partialArgs struct {
	A     string
	Table string
	Hold  bool
}

//go:embed sql/head_of_key.tmpl
var sharedTemplates string

// parseQuery parses one query template together with the shared ones.
func parseQuery(name, src string, funcs template.FuncMap) (*template.Template, error) {
	t, err := template.New(name).Option("missingkey=error").Funcs(funcs).Parse(sharedTemplates)
	if err != nil {
		return nil, err
	}
	return t.Parse(src)
}
