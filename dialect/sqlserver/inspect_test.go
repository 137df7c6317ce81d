package sqlserver

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/address"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

// likeMatch evaluates a LIKE pattern with escape character \ the way SQL
// Server does under a case- and accent-sensitive (binary) collation: %
// any run of characters, _ any one character, [ a character class, \x the
// literal x. Case-insensitive collations only match more, so a pattern
// that matches a superset here matches a superset there too.
func likeMatch(t *testing.T, pattern, s string) bool {
	t.Helper()
	var b strings.Builder
	b.WriteString(`(?s)^`)
	rs := []rune(pattern)
	for i := 0; i < len(rs); i++ {
		switch r := rs[i]; r {
		case '\\':
			i++
			if i == len(rs) {
				t.Fatalf("LIKE pattern %q ends with the escape character", pattern)
			}
			b.WriteString(regexp.QuoteMeta(string(rs[i])))
		case '%':
			b.WriteString(`.*`)
		case '_':
			b.WriteString(`.`)
		case '[':
			t.Fatalf("LIKE pattern %q has an unescaped [ (a character class)", pattern)
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString(`$`)
	return regexp.MustCompile(b.String()).MatchString(s)
}

// TestSQLServerTopicLikeCoversRouter checks the LIKE translation of topic
// patterns against the router on a table of topics: every topic the router
// matches, the LIKE matches (it is the SQL-side narrowing; Go keeps the
// exact matches), and the full filter (LIKE, then router) equals the router.
func TestSQLServerTopicLikeCoversRouter(t *testing.T) {
	patterns := []string{
		"**", "*", "*.*", "order.*", "order.**", "*.created", "order.*.paid", "order.created",
		"a+b.(c)", `x\y.**`, "o.r[d]$.*", "100%.*", "snake_case.*", "a_b", "ü.*", "*.sent", "a.*.**",
	}
	topics := []string{
		"order", "order.", "order.created", "order.eu.paid", "orderXcreated", "order.created.x", "ORDER.created",
		"a+b.(c)", "aab.c", `x\y.z`, `xy.z`, "x.y.z", "o.r[d]$.q", "o.rd.q", "o.r[d]$", "invoice.created",
		"ü.created", "u.created", "100%.x", "1000.x", "100.x", "snake_case.v1", "snakeXcase.v1", "a_b", "aXb",
		"invoice.sent", "sent", "a.b", "a.b.c", "a..", ".", "x",
	}
	for _, p := range patterns {
		f, err := parseTopicFilter(p)
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		rp := address.MustParsePattern(p)
		for _, topic := range topics {
			want := rp.Match(topic)
			like := f.like == "" || likeMatch(t, f.like, topic)
			if want && !like {
				t.Errorf("pattern %q: LIKE %q excludes %q, which the router matches", p, f.like, topic)
			}
			if got := like && f.match(topic); got != want {
				t.Errorf("pattern %q, topic %q: filter %v, router %v", p, topic, got, want)
			}
		}
	}
}

func TestSQLServerTopicLike(t *testing.T) {
	for pattern, want := range map[string]string{
		"**":            "",
		"*":             "",
		"*.*":           "",
		"order.*":       "order.%",
		"order.**":      "order.%",
		"order.created": "order.created",
		"*.created":     "%.created",
		"order.*.paid":  "order.%.paid",
		"100%.*":        `100\%.%`,
		"snake_case.*":  `snake\_case.%`,
		"o.r[d]$.*":     `o.r\[d]$.%`,
		`x\y.**`:        `x\\y.%`,
	} {
		if got := topicLike(pattern); got != want {
			t.Errorf("topicLike(%q) = %q, want %q", pattern, got, want)
		}
	}
	f, err := parseTopicFilter("")
	if err != nil || f.set || f.param() != nil || !f.match("anything") {
		t.Errorf("empty pattern: %+v %v", f, err)
	}
	if f, _ := parseTopicFilter("**"); f.param() != nil || !f.set {
		t.Errorf("** should filter in Go only: %+v", f)
	}
	for _, bad := range []string{"a..b", ".a", "a.", "a.**.b", "ord*"} {
		_, err := parseTopicFilter(bad)
		if err == nil {
			t.Errorf("%q accepted", bad)
		} else if !outbox.IsPermanent(err) {
			t.Errorf("%q: %v is not permanent", bad, err)
		}
	}
}

// TestSQLServerOperatorRejectsBadInput: the checks that run before any
// statement (so they need no server).
func TestSQLServerOperatorRejectsBadInput(t *testing.T) {
	d := unreachableDialect(t)
	ctx := context.Background()
	if _, err := d.Replay(ctx, dialect.ReplayParams{}); !errors.Is(err, dialect.ErrNoSelector) {
		t.Errorf("replay without selector: %v", err)
	}
	now := time.Now()
	for name, p := range map[string]dialect.ReplayParams{
		"pending state":   {State: "pending", Key: "k"},
		"malformed id":    {IDs: []string{"not-a-uuid"}},
		"bad pattern":     {TopicPattern: "a.**.b"},
		"until <= since":  {Since: now, Until: now},
		"processing rows": {State: "processing", Key: "k"},
	} {
		if _, err := d.Replay(ctx, p); err == nil || !outbox.IsPermanent(err) {
			t.Errorf("replay %s: %v, want a permanent error", name, err)
		}
	}
	if _, err := d.DeadList(ctx, dialect.DeadListParams{TopicPattern: "ord*"}); err == nil || !outbox.IsPermanent(err) {
		t.Errorf("dead list with a bad pattern: %v", err)
	}
	for _, s := range []string{"pending", "processing", ""} {
		if _, err := d.Purge(ctx, dialect.PurgeParams{State: s, OlderThan: time.Hour, Limit: 10}); err == nil || !outbox.IsPermanent(err) {
			t.Errorf("purge %q: %v, want a permanent error", s, err)
		}
	}
	for _, p := range []dialect.PurgeParams{{State: "sent", Limit: 0}, {State: "dead", OlderThan: -time.Second, Limit: 5}} {
		if n, err := d.Purge(ctx, p); n != 0 || err != nil {
			t.Errorf("purge %+v = %d, %v; want a no-op", p, n, err)
		}
	}
}

// TestSQLServerOperatorUnreachable: the operator calls fail with the cause
// when the server is down, like the delivery path.
func TestSQLServerOperatorUnreachable(t *testing.T) {
	d := unreachableDialect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := d.Stats(ctx, dialect.StatsParams{TopTopics: 3})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") || strings.Contains(err.Error(), "secret-password") {
		t.Errorf("stats against an unreachable server: %v", err)
	}
}

// TestSQLServerOperatorSQL checks properties of the operator statements
// that the goldens pin only implicitly.
func TestSQLServerOperatorSQL(t *testing.T) {
	q, err := Render(dialect.DefaultMapping())
	if err != nil {
		t.Fatal(err)
	}
	for name := range q {
		if deliveryQueries[name] {
			continue
		}
		c := code(q[name])
		for _, bad := range []string{"LIMIT ", "::", "now()", " OFFSET ", "NOLOCK", "~"} {
			if strings.Contains(c, bad) {
				t.Errorf("%s contains %q (PostgreSQL syntax or a dirty read)", name, bad)
			}
		}
	}
	for name, wants := range map[string][]string{
		"stats_counts":  {"COUNT_BIG(*) FROM [outbox] WHERE [state] = N'pending'", "COUNT_BIG(*) FROM [outbox] WHERE [state] = N'dead'", "DATEDIFF_BIG(millisecond, MIN([scheduled_at]), SYSUTCDATETIME())"},
		"stats_backlog": {"SELECT TOP (@n)", "WHERE s.[state] = N'pending'", "ORDER BY COUNT_BIG(*) DESC, s.[topic]"},
		"dead_list": {"SELECT TOP (@n)", "WHERE d.[state] = N'dead'", "d.[topic] LIKE @topic_like ESCAPE N'\\'",
			"ORDER BY d.[updated_at] DESC, d.[sequence] DESC", "OPTION (RECOMPILE)"},
		"replay_select": {"SELECT TOP (@n)", "r.[state] IN (N'dead', N'sent')", "OPENJSON(@ids) WITH (item_id UNIQUEIDENTIFIER '$')",
			"r.[topic] LIKE @topic_like ESCAPE N'\\'", "ORDER BY r.[sequence], r.[id]", "r.[sequence] > @after_seq"},
		"replay": {"OPENJSON(@ids) WITH (item_id UNIQUEIDENTIFIER '$')", "o.[state] = @state", "o.[state] IN (N'dead', N'sent')",
			"[state] = N'pending'", "[attempt] = 0", "[scheduled_at] = SYSUTCDATETIME()", "[last_error] = NULL", "[claim_token] = NULL", "WITH (ROWLOCK)"},
		"purge": {"SELECT TOP (@limit)", "WITH (UPDLOCK, READPAST, ROWLOCK)", "p.[state] IN (N'sent', N'dead')",
			"p.[updated_at] < DATEADD(millisecond, -@age_ms, DATEADD(second, -@age_s, SYSUTCDATETIME()))", "DELETE FROM doomed"},
	} {
		c := code(q[name])
		for _, w := range wants {
			if !strings.Contains(c, w) {
				t.Errorf("%s lacks %q:\n%s", name, w, c)
			}
		}
	}
	// READPAST only where skipping is right: purge (retention is best
	// effort). Replay waits for the rows the operator named; the reads lock
	// nothing (READPAST on a plain read is refused under RCSI).
	for _, name := range []string{"replay", "replay_select", "dead_list", "stats_counts", "stats_backlog"} {
		if strings.Contains(code(q[name]), "READPAST") {
			t.Errorf("%s uses READPAST", name)
		}
	}
}

// TestSQLServerMinimalMapping: a table without any optional column (lease
// columns aside) renders every query, and no query names a column the
// table lacks.
func TestSQLServerMinimalMapping(t *testing.T) {
	m := goldenMappings(t)["minimal"]
	q, err := Render(m)
	if err != nil {
		t.Fatal(err)
	}
	def := dialect.DefaultMapping()
	for _, logical := range absentInMinimal {
		if m.Has(logical) {
			t.Fatalf("minimal mapping has %s", logical)
		}
		physical, _ := def.Column(logical)
		for name, sql := range q {
			if strings.Contains(code(sql), "["+physical+"]") {
				t.Errorf("%s names the absent column %s ([%s]):\n%s", name, logical, physical, sql)
			}
		}
	}
	if c := code(q["purge"]); !strings.Contains(c, "1 = 0") {
		t.Errorf("purge without updatedAt should keep every row (the age is unknown):\n%s", c)
	}
}

func TestSQLServerRenderNeedsLeaseColumns(t *testing.T) {
	for _, c := range dialect.LeaseColumns {
		m, err := dialect.NewMapping("", map[string]string{c: "~"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Render(m); err == nil || !strings.Contains(err.Error(), c) {
			t.Errorf("mapping without %s: %v, want an error naming it", c, err)
		}
	}
	m, err := dialect.NewMapping("", nil, map[string]string{"processing": ""})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Render(m); err == nil {
		t.Error("mapping without a processing state rendered")
	}
}
