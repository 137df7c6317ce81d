package sqlserver

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/dialect/postgres"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.sql from the rendered SQL")

// goldenMappings are the mappings whose rendered SQL is pinned in
// testdata/<mapping>.<query>.golden.sql.
func goldenMappings(t *testing.T) map[string]dialect.Mapping {
	t.Helper()
	reserved, err := dialect.NewMapping("order", map[string]string{
		"topic": "order", "aggregateType": "user", "key": "key", "state": "select", "sentAt": "sent_at",
	}, map[string]string{"dead": "it's dead"})
	if err != nil {
		t.Fatal(err)
	}
	qualified, err := dialect.NewMapping("dbo.outbox", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	minimal, err := dialect.NewMapping("", minimalColumns(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]dialect.Mapping{
		"default":   dialect.DefaultMapping(),
		"reserved":  reserved,
		"qualified": qualified,
		"minimal":   minimal,
	}
}

// absentInMinimal are the logical columns the minimal mapping declares
// absent: every optional column except the lease columns, which the SQL
// Server dialect (lease mode only) requires.
var absentInMinimal = []string{
	dialect.ColHeaders, dialect.ColKey, dialect.ColAggregateType, dialect.ColAttempt, dialect.ColMaxAttempts,
	dialect.ColLastError, dialect.ColUpdatedAt, dialect.ColCreatedAt, dialect.ColScheduledAt,
}

func minimalColumns() map[string]string {
	cols := map[string]string{}
	for _, c := range absentInMinimal {
		cols[c] = "~"
	}
	return cols
}

func TestSQLServerGolden(t *testing.T) {
	for name, m := range goldenMappings(t) {
		queries, err := Render(m)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, q := range QueryNames() {
			file := filepath.Join("testdata", name+"."+q+".golden.sql")
			if *update {
				if err := os.WriteFile(file, []byte(queries[q]), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run go test -run SQLServerGolden -update to create it)", err)
			}
			if queries[q] != string(want) {
				t.Errorf("%s: rendered SQL differs from %s (run with -update if the change is intended):\n%s", q, file, queries[q])
			}
		}
	}
}

// holdQueries are the two queries that only relay.onDead: hold uses. Hold
// is PostgreSQL-only for now (the SQL Server table has no held_at column),
// so the SQL Server dialect defines them for parity as statements that
// select nothing, and does not implement dialect.KeyReleaser; Stats never
// runs stats_held_keys. They are defined all the same, so that the query
// sets are equal and SQL Server's hold support, when it comes, fills in
// existing files instead of adding names.
var holdQueries = []string{"dead_release", "stats_held_keys"}

// TestSQLServerQueryNamesMatchPostgres: both dialects define exactly
// dialect.QueryNames(), the delivery path and the operator surface alike.
func TestSQLServerQueryNamesMatchPostgres(t *testing.T) {
	got := QueryNames()
	want := slices.Clone(postgres.QueryNames())
	if !slices.Equal(got, want) {
		t.Fatalf("sqlserver queries %v, want the postgres set %v", got, want)
	}
	if all := dialect.QueryNames(); !slices.Equal(all, want) {
		t.Errorf("postgres queries %v differ from dialect.QueryNames() %v", want, all)
	}
	q, err := Render(dialect.DefaultMapping())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range holdQueries {
		if c := code(q[name]); !strings.Contains(c, "WHERE 1 = 0") || strings.Contains(c, "[outbox]") {
			t.Errorf("%s should select nothing without reading the table (hold is PostgreSQL-only):\n%s", name, q[name])
		}
	}
	var d any = &Dialect{}
	if _, ok := d.(dialect.KeyReleaser); ok {
		t.Error("the SQL Server dialect implements dialect.KeyReleaser, but it cannot hold keys")
	}
}

// TestSQLServerRenderBothDialects renders every query of both dialects from
// the same mappings: each mapping works for both, and neither leaves an
// action unrendered.
func TestSQLServerRenderBothDialects(t *testing.T) {
	for name, m := range goldenMappings(t) {
		ms, err := Render(m)
		if err != nil {
			t.Fatalf("sqlserver %s: %v", name, err)
		}
		if name == "minimal" {
			// PostgreSQL's lease-mode claim writes updated_at
			// unconditionally, so it cannot render this mapping; the
			// SQL Server side is checked by TestSQLServerMinimalMapping.
			continue
		}
		pg, err := postgres.Render(m)
		if err != nil {
			t.Fatalf("postgres %s: %v", name, err)
		}
		for _, q := range QueryNames() {
			if ms[q] == "" || pg[q] == "" {
				t.Errorf("%s: query %s missing (sqlserver %d bytes, postgres %d bytes)", name, q, len(ms[q]), len(pg[q]))
			}
			if strings.Contains(ms[q], "{{") {
				t.Errorf("%s: query %s has an unrendered action", name, q)
			}
		}
	}
}

// deliveryQueries are the queries of the delivery path (dialect.Dialect);
// the rest are the operator surface.
var deliveryQueries = map[string]bool{
	"claim": true, "complete": true, "dead": true, "release": true, "release_expired": true, "renew": true, "retry": true,
}

var (
	lineComment = regexp.MustCompile(`(?m)--.*$`)
	bareKey     = regexp.MustCompile(`[^\[\w@]key[^\]\w]`) // @key is a parameter
)

func code(sql string) string { return lineComment.ReplaceAllString(sql, "") }

// TestSQLServerRenderedSQL checks properties of every rendered statement that
// the goldens pin only implicitly.
func TestSQLServerRenderedSQL(t *testing.T) {
	queries, err := Render(dialect.DefaultMapping())
	if err != nil {
		t.Fatal(err)
	}
	for name, q := range queries {
		c := code(q)
		delivery := deliveryQueries[name]
		// One clock: the database's, in UTC.
		for _, bad := range []string{"GETDATE", "SYSDATETIME()", "CURRENT_TIMESTAMP", "now()", "GETUTCDATE"} {
			if strings.Contains(c, bad) {
				t.Errorf("%s uses %s; every time must come from SYSUTCDATETIME()", name, bad)
			}
		}
		if delivery && name != "release_expired" && !strings.Contains(c, "@token") {
			t.Errorf("%s is not fenced on the claim token", name)
		}
		if m := bareKey.FindString(c); m != "" {
			t.Errorf("%s has an unbracketed key: %q", name, m)
		}
		if strings.Contains(c, `"`) {
			t.Errorf("%s quotes with double quotes", name)
		}
		if delivery && !strings.Contains(c, "[state] = N'processing'") && !strings.Contains(c, "[state] = N'pending'") {
			t.Errorf("%s does not compare the state with an N'' literal", name)
		}
	}
	claim := code(queries["claim"])
	for _, want := range []string{
		"FROM [outbox] AS c WITH (UPDLOCK, READPAST, ROWLOCK)",
		"SELECT TOP (@limit)",
		"ORDER BY c.[sequence], c.[id]",
		"DATEADD(millisecond, CONVERT(INT, @lease_ms), SYSUTCDATETIME())",
		"OUTPUT LOWER(CONVERT(NVARCHAR(36), inserted.[id]))",
		"INTO @claimed",
	} {
		if !strings.Contains(claim, want) {
			t.Errorf("claim lacks %q", want)
		}
	}
	// The head-of-key probes must see locked rows: no hint on them, and
	// READPAST exactly once (the candidate scan).
	if n := strings.Count(claim, "READPAST"); n != 1 {
		t.Errorf("claim has READPAST %d times, want once (on the candidate scan only)", n)
	}
	if n := strings.Count(claim, "NOT EXISTS"); n != 2 {
		t.Errorf("claim has %d head-of-key probes, want 2 (scan and UPDATE)", n)
	}
	if n := strings.Count(claim, "FROM [outbox] AS b\n"); n != 2 {
		t.Errorf("claim probes the table %d times without a hint, want 2", n)
	}
	for _, name := range []string{"complete", "retry", "dead", "renew"} {
		if !strings.Contains(queries[name], "> SYSUTCDATETIME()") {
			t.Errorf("%s is not fenced on an unexpired lease", name)
		}
	}
	for _, name := range []string{"complete", "release"} {
		if !strings.Contains(queries[name], "OPENJSON(@ids)") {
			t.Errorf("%s does not take its ids as one JSON parameter", name)
		}
	}
	for _, name := range []string{"retry", "dead"} {
		if !strings.Contains(queries[name], "OPENJSON(@items)") {
			t.Errorf("%s does not take its items as one JSON parameter", name)
		}
	}
	if !strings.Contains(queries["release_expired"], "WITH (UPDLOCK, READPAST, ROWLOCK)") {
		t.Error("release_expired does not skip locked rows")
	}
}

func TestSQLServerRenderQuotesReservedWords(t *testing.T) {
	q, err := Render(goldenMappings(t)["reserved"])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"FROM [order] AS c", "c.[order]", "c.[user]", "c.[key]", "c.[select] = N'pending'"} {
		if !strings.Contains(q["claim"], want) {
			t.Errorf("claim lacks %s", want)
		}
	}
	if !strings.Contains(q["dead"], "[select] = N'it''s dead'") {
		t.Errorf("dead does not quote the state literal:\n%s", q["dead"])
	}
	if !strings.Contains(q["complete"], "[sent_at] = SYSUTCDATETIME()") {
		t.Errorf("complete does not set the optional sentAt column:\n%s", q["complete"])
	}
	if d, _ := Render(dialect.DefaultMapping()); strings.Contains(d["complete"], "sent_at") {
		t.Error("default mapping sets sent_at, which the bundled table lacks")
	}
	qq, err := Render(goldenMappings(t)["qualified"])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range QueryNames() {
		if slices.Contains(holdQueries, name) {
			continue // they read no table
		}
		if !strings.Contains(qq[name], "[dbo].[outbox]") {
			t.Errorf("%s does not use the schema-qualified table", name)
		}
	}
	if got := QuoteIdent("a]b"); got != "[a]]b]" {
		t.Errorf("QuoteIdent(a]b) = %s", got)
	}
	if got := quoteLiteral("it's"); got != "N'it''s'" {
		t.Errorf("quoteLiteral(it's) = %s", got)
	}
}

func TestSQLServerRenderRejects(t *testing.T) {
	if _, err := Render(dialect.Mapping{}); err == nil {
		t.Error("Render accepted the zero Mapping")
	}
	if _, err := New(nil, dialect.DefaultMapping()); err == nil {
		t.Error("New accepted a nil *sql.DB")
	}
}
