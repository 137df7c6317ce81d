package postgres

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"math"
	"path"
	"strconv"
	"strings"
	"sync"
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
//	errorText "x"  expression x (an error text) cut to the lastError
//	           column's length (WithLastErrorLength), or x
//	idType     the id column's SQL type
//	alias "c"  the argument of the shared template headOfKey (head_of_key.tmpl) for
//	           table alias c
//	literal x  x as a string constant ('x', quotes doubled): the quoted table
//	           as the text of a ::regclass cast
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
		"ids": func(param string) string { return param + "::text[]::" + idType + "[]" },
		// errorText is an error text as the lastError column can hold it.
		"errorText": func(expr string) string {
			if o.lastErrorLen > 0 {
				return fmt.Sprintf("left(%s, %d)", expr, o.lastErrorLen)
			}
			return expr
		},
		"idType":  func() string { return idType },
		"literal": quoteLiteral,
		"alias": func(a string) partialArgs {
			pa := partialArgs{A: a, Table: m.Table(QuoteIdent), Hold: o.hold, Buckets: o.buckets}
			if o.buckets {
				pa.BucketTable, pa.MemberTable = bucketTables(m)
			}
			return pa
		},
		"bucketCount":     func() int { return BucketCount },
		"maxBlockers":     func() int { return dialect.MaxBlockers },
		"bucketLockSpace": func() int64 { return bucketLockSpace },
	}
}

// partialArgs are what a shared template sees: the alias of the row it is
// about, the quoted table and the hold mode.
type partialArgs struct {
	A       string
	Table   string
	Hold    bool
	Buckets bool // bucket mode (bucket.tmpl)
	// BucketTable and MemberTable are bucket mode's tables, quoted.
	BucketTable, MemberTable string
}

// sharedTemplates are the templates every query may call: headOfKey,
// claimWindow and claimTurnKey.
//
//go:embed sql/*.tmpl
var sharedTemplates embed.FS

// parseQuery parses one query template together with the shared ones.
func parseQuery(name, src string, funcs template.FuncMap) (*template.Template, error) {
	t, err := template.New(name).Option("missingkey=error").Funcs(funcs).ParseFS(sharedTemplates, "sql/*.tmpl")
	if err != nil {
		return nil, err
	}
	return t.Parse(src)
}

// renderData is what every .sql template is executed with.
type renderData struct {
	Table string // the quoted table
	// ClaimTurnSpace is the high half of the claim turn's key
	// (claim_turn.tmpl).
	ClaimTurnSpace int64
	Hold           bool // relay.onDead: hold
	// UniqueID: the id column has a unique index (WithUniqueID); the
	// claim's UPDATE does not repeat the head-of-key probe.
	UniqueID bool
	// Limit and Window shape a claim statement (claim.sql, lock/claim.sql):
	// its LIMIT and, when Window > 0, its bounded candidate window. They are
	// literals in the SQL, not bind parameters; see claimShapes.
	Limit  int
	Window int
	// From and Skip are the bind parameters of a windowed claim's
	// dialect.ClaimParams.From and Skip ($3 and $4 in claim.sql, $1 and $2
	// in lock/claim.sql).
	From, Skip string
	// Buckets: bucket mode (NewBucketMode); BucketTable and MemberTable
	// are its two tables, quoted.
	Buckets                  bool
	BucketTable, MemberTable string
}

// renderLimit is the LIMIT of the claim statements that Render and
// RenderLock return for inspection; the dialects render one claim per
// shape (claimShape) they are asked for.
const renderLimit = 100

// maxClaimShapes bounds the claim statements one dialect keeps rendered. An
// engine asks for a handful: its batch size and the smaller claims it makes
// when its in-flight budget is nearly full.
const maxClaimShapes = 16

// claimShape is what a rendered claim statement is made for: its LIMIT and
// its window (0: unbounded).
type claimShape struct {
	limit, window int
}

// shapeOf is the claim shape of p.
func shapeOf(p dialect.ClaimParams) claimShape {
	return claimShape{limit: p.Limit, window: max(p.Window, 0)}
}

// claimShapes renders a claim statement per shape (claimShape), once.
//
// The batch size and the window are written into the SQL as literals: as
// bind parameters, a generic plan (made without their values) looked worse
// than the custom one and, forced, ran slower. With literals the two are
// the same plan. The relay's connections plan every execution all the same
// (PlanEachExecution): a generic plan kept from when the table was empty is
// the worse risk.
type claimShapes struct {
	tmpl   *template.Template
	data   renderData
	hasKey bool // the table has a key column: windowed claims take the skip list

	mu     sync.Mutex
	shapes map[claimShape]renderedClaim
}

// renderedClaim is a claim statement and the name turnClaim prepares it
// under (preparedName).
type renderedClaim struct {
	sql, name string
}

// newClaimShapes parses the claim template file of fsys for m.
// from is the bind parameter of dialect.ClaimParams.From in that file; the
// skip list (ClaimParams.Skip) follows it.
func newClaimShapes(fsys fs.FS, file, from string, m dialect.Mapping, o options) (*claimShapes, error) {
	tmpl, err := parseFile(fsys, file, templateFuncs(m, o))
	if err != nil {
		return nil, err
	}
	data := renderDataFor(m, o)
	n, _ := strconv.Atoi(strings.TrimPrefix(from, "$"))
	data.From, data.Skip = from, "$"+strconv.Itoa(n+1)
	c := &claimShapes{tmpl: tmpl, data: data, shapes: map[claimShape]renderedClaim{}, hasKey: m.Has("key")}
	if _, err := c.sql(claimShape{limit: renderLimit, window: renderLimit}); err != nil { // fail at start, not at the first claim
		return nil, err
	}
	return c, nil
}

// sql returns the claim statement of shape key (a window of 0 or less:
// unbounded).
func (c *claimShapes) sql(key claimShape) (string, error) {
	r, _, err := c.sqlKept(key)
	return r.sql, err
}

// sqlKept is sql, and reports whether the statement is one of the
// maxClaimShapes kept: only those stay prepared on a connection (turnClaim
// deallocates the others after their claim), so that a caller asking for
// ever new shapes cannot fill the connections with prepared statements.
func (c *claimShapes) sqlKept(key claimShape) (renderedClaim, bool, error) {
	key.window = max(key.window, 0)
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.shapes[key]; ok {
		return r, true, nil
	}
	d := c.data
	d.Limit, d.Window = key.limit, key.window
	q, err := execute(c.tmpl, d)
	if err != nil {
		return renderedClaim{}, false, err
	}
	r := renderedClaim{sql: q, name: preparedName(q)}
	kept := len(c.shapes) < maxClaimShapes
	if kept {
		c.shapes[key] = r
	}
	return r, kept, nil
}

// windowArgs are the bind parameters a windowed claim of shape key takes
// after the claim's own: where its window may start at the earliest (the
// lowest sequence for the front), and the skip list when the table has a
// key column.
func (c *claimShapes) windowArgs(key claimShape, p dialect.ClaimParams) []any {
	if key.window == 0 {
		return nil
	}
	from := p.From
	if from == 0 {
		from = math.MinInt64
	}
	args := []any{from}
	if c.hasKey {
		skip := p.Skip
		if skip == nil {
			skip = []string{}
		}
		args = append(args, skip)
	}
	return args
}

func newOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

func renderDataFor(m dialect.Mapping, o options) renderData {
	d := renderData{Table: m.Table(QuoteIdent), ClaimTurnSpace: claimTurnSpace,
		Hold: o.hold, UniqueID: o.uniqueID, Limit: renderLimit, Buckets: o.buckets}
	if o.buckets {
		d.BucketTable, d.MemberTable = bucketTables(m)
	}
	return d
}

// parseFile parses one embedded .sql template; file is its path in fsys.
func parseFile(fsys fs.FS, file string, funcs template.FuncMap) (*template.Template, error) {
	src, err := fs.ReadFile(fsys, file)
	if err != nil {
		return nil, err
	}
	tmpl, err := parseQuery(path.Base(file), string(src), funcs)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse %s: %w", file, err)
	}
	return tmpl, nil
}

// execute renders a parsed template.
func execute(tmpl *template.Template, data renderData) (string, error) {
	var b bytes.Buffer
	if err := tmpl.Execute(&b, data); err != nil {
		return "", fmt.Errorf("postgres: render %s: %w", tmpl.Name(), err)
	}
	return b.String(), nil
}

// renderFiles renders dir/<name>.sql of fsys for every name.
func renderFiles(fsys fs.FS, dir string, names []string, m dialect.Mapping, o options) (map[string]string, error) {
	funcs, data := templateFuncs(m, o), renderDataFor(m, o)
	out := make(map[string]string, len(names))
	for _, name := range names {
		tmpl, err := parseFile(fsys, path.Join(dir, name+".sql"), funcs)
		if err != nil {
			return nil, err
		}
		if out[name], err = execute(tmpl, data); err != nil {
			return nil, err
		}
	}
	return out, nil
}
