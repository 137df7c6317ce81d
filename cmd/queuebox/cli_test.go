package main

// Tests of the command line's contract (docs/cli.md): -o json on every
// reporting command, exit codes, suggestions, progress on stderr, check
// changing nothing and replay within a JetStream duplicate window. They
// run the commands in-process (opWorld.cli) against the real services.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/queuebox/queuebox/internal/testenv"
)

// oneJSONDocument decodes out as exactly one JSON object or array, nothing
// after it.
func oneJSONDocument(t *testing.T, what, out string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: stdout is not JSON: %v\n%s", what, err, out)
	}
	if err := dec.Decode(new(any)); !errors.Is(err, io.EOF) {
		t.Fatalf("%s: stdout holds more than one JSON document (%v):\n%s", what, err, out)
	}
	return v
}

// hasKeys fails unless the JSON object v has every key.
func hasKeys(t *testing.T, what string, v any, keys ...string) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: %T, want a JSON object", what, v)
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s: no %q in %v", what, k, m)
		}
	}
	return m
}

// TestEveryReportingCommandPrintsJSON: each reporting command with -o json
// prints one JSON document of its documented shape on stdout, and an
// output format it does not know is a usage error.
func TestEveryReportingCommandPrintsJSON(t *testing.T) {
	w := newOpWorld(t, "hold")
	ids := w.insertDead(t, "order.created", "k1", "")
	cases := []struct {
		args []string
		code int
		keys []string
	}{
		{[]string{"version"}, 0, []string{"version", "revision", "buildDate", "goVersion", "platform"}},
		{[]string{"migrate", "status"}, 0, []string{"migrations"}},
		{[]string{"migrate", "up"}, 0, []string{"applied", "version"}},
		{[]string{"stats"}, 0, []string{"states", "oldestPendingAgeSeconds", "backlog", "heldKeys"}},
		{[]string{"dead", "list"}, 0, nil},
		{[]string{"replay", "--id", ids[0], "--dry-run"}, 0, []string{"state", "dryRun", "selected", "replayed", "left", "refused"}},
		{[]string{"replay", "--id", ids[0]}, 0, []string{"state", "dryRun", "selected", "replayed", "left", "refused"}},
		{[]string{"dead", "release", "--key", "k1"}, 1, []string{"key", "released"}},
		// The hooks destination (127.0.0.1:1) does not answer: a failed check.
		{[]string{"check"}, 1, []string{"ok", "findings"}},
	}
	for _, c := range cases {
		what := strings.Join(c.args, " ")
		code, out, errOut := w.cli(t, append(c.args, "-o", "json")...)
		if code != c.code {
			t.Errorf("%s -o json: exit %d, want %d\n%s", what, code, c.code, errOut)
			continue
		}
		v := oneJSONDocument(t, what, out)
		if c.keys == nil {
			if rows, ok := v.([]any); !ok || len(rows) != 2 {
				t.Errorf("%s: %v, want an array of the 2 dead rows", what, v)
			}
			continue
		}
		hasKeys(t, what, v, c.keys...)
		if code, _, errOut := w.cli(t, append(c.args, "-o", "yaml")...); code != 2 || !strings.Contains(errOut, "want text or json") {
			t.Errorf("%s -o yaml: exit %d, want 2 naming the formats\n%s", what, code, errOut)
		}
	}
	code, out, _ := w.cli(t, "replay", "--id", ids[1], "-o", "json")
	if m := hasKeys(t, "replay", oneJSONDocument(t, "replay", out)); code != 0 || m["replayed"] != float64(1) || m["selected"] != float64(1) {
		t.Errorf("replay of one row: exit %d, %v", code, m)
	}
}

// TestCheckJSONFindings: check -o json reports each finding with its level
// and fix; a healthy setup is ok with exit 0.
func TestCheckJSONFindings(t *testing.T) {
	w := newWorld(t, 0)
	cfg := w.config(t, "")
	code, out, errOut := (&opWorld{config: cfg}).cli(t, "check", "-o", "json")
	if code != 0 {
		t.Fatalf("check: exit %d\n%s%s", code, out, errOut)
	}
	var rep struct {
		OK       bool `json:"ok"`
		Findings []struct{ Level, Message, Fix string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || !rep.OK || len(rep.Findings) == 0 {
		t.Fatalf("check -o json: %v %+v\n%s", err, rep, out)
	}
	levels := map[string]bool{}
	for _, f := range rep.Findings {
		levels[f.Level] = true
		if f.Message == "" {
			t.Errorf("finding without a message: %+v", f)
		}
	}
	if !levels["ok"] || !levels["warn"] || levels["fail"] {
		t.Errorf("levels %v, want ok and warn (the subject template without a stream) and no fail", levels)
	}
}

// TestCheckLeavesAMissingStreamMissing: with createStream: true, check
// reports the missing stream as one that run will create, and it is still
// missing afterwards.
func TestCheckLeavesAMissingStreamMissing(t *testing.T) {
	w := newWorld(t, 0)
	stream := strings.ToUpper(testenv.UniqueName("qbcheck"))
	cfg := writeConfig(t, fmt.Sprintf(`database:
  url: %q
  outboxTable: %s.outbox
server:
  listen: ""
destinations:
  events:
    type: nats
    servers: [%q]
    subject: "%s.{{ topic }}"
    stream: %s
    createStream: true
    streamSubjects: ["%s.>"]
routes:
  - topicPattern: "**"
    destination: events
`, w.pg.URL, w.pg.Schema, w.natsURL, w.subject+"x", stream, w.subject+"x"))
	t.Cleanup(func() { _ = w.js.DeleteStream(context.Background(), stream) })
	code, out, errOut := (&opWorld{config: cfg}).cli(t, "check")
	want := "note  destination events (nats): stream " + stream + " is missing; run will create it (createStream: true)"
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("check: exit %d, want 0 and %q\n%s%s", code, want, out, errOut)
	}
	ctx := testenv.Context(t, 10*time.Second)
	if _, err := w.js.Stream(ctx, stream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("after check, stream %s: %v; want it still missing", stream, err)
	}
}

// TestMistypedCommandSuggests: an unknown command is a usage error that
// names the nearest command, at every level.
func TestMistypedCommandSuggests(t *testing.T) {
	w := &opWorld{config: "/nonexistent.yaml"}
	for args, want := range map[string]string{
		"stat":             `unknown command "stat" for "queuebox" (did you mean "stats"?)`,
		"dead lst":         `unknown command "lst" for "queuebox dead" (did you mean "list"?)`,
		"migrate stauts":   `unknown action "stauts" (want up, status or sql) (did you mean "status"?)`,
		"frobnicate-thing": `unknown command "frobnicate-thing" for "queuebox"`,
	} {
		code, _, errOut := w.cli(t, strings.Fields(args)...)
		if code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("queuebox %s: exit %d, want 2 and %q\n%s", args, code, want, errOut)
		}
		if strings.HasPrefix(args, "frob") && strings.Contains(errOut, "did you mean") {
			t.Errorf("queuebox %s: a suggestion for a word near no command:\n%s", args, errOut)
		}
	}
}

// TestDeadReleaseOfAnUnheldKeyFails: releasing a key no dead row holds
// exits 1 with the reason; a held key is released with exit 0.
func TestDeadReleaseOfAnUnheldKeyFails(t *testing.T) {
	w := newOpWorld(t, "hold")
	w.insertDead(t, "order.created", "held")
	if _, err := w.pool.Exec(context.Background(), `UPDATE outbox SET held_at = now() WHERE key = 'held'`); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := w.cli(t, "dead", "release", "--key", "nobody")
	if code != 1 || !strings.Contains(errOut, `key "nobody" is not held by any dead row, nothing released`) || out != "" {
		t.Errorf("release of an unheld key: exit %d, stdout %q, stderr %s", code, out, errOut)
	}
	code, out, _ = w.cli(t, "dead", "release", "--key", "held")
	if code != 0 || !strings.Contains(out, `released key "held": 1 dead rows`) {
		t.Errorf("release of a held key: exit %d, %q", code, out)
	}
	// Listed as held from the row's own flag, with no later row waiting.
	w.insertDead(t, "order.created", "alone")
	if _, err := w.pool.Exec(context.Background(), `UPDATE outbox SET held_at = now() WHERE key = 'alone'`); err != nil {
		t.Fatal(err)
	}
	code, out, _ = w.cli(t, "dead", "list", "--key", "alone")
	if code != 0 || !regexp.MustCompile(`alone\s.*\sheld\n`).MatchString(out) {
		t.Errorf("dead list of a held row with nothing waiting: exit %d\n%s", code, out)
	}
}

// TestMissingTableNamesMigrateUp: an operator command on a table that does
// not exist says to run queuebox migrate up.
func TestMissingTableNamesMigrateUp(t *testing.T) {
	w := newOpWorld(t, "release")
	if _, err := w.pool.Exec(context.Background(), `DROP TABLE outbox`); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"stats"}, {"dead", "list"}, {"replay", "--key", "k"}} {
		code, _, errOut := w.cli(t, args...)
		if code != 1 || !strings.Contains(errOut, "does not exist") || !strings.Contains(errOut, "queuebox migrate up") {
			t.Errorf("%v on a missing table: exit %d, want 1 naming queuebox migrate up\n%s", args, code, errOut)
		}
	}
}

// TestReplayShowsProgress: a replay that is not on a terminal writes plain
// progress lines on stderr, rows done of the total with the rate, and ends
// with the whole count; stdout holds only the report.
func TestReplayShowsProgress(t *testing.T) {
	w := newOpWorld(t, "release")
	if _, err := w.pool.Exec(context.Background(), `INSERT INTO outbox (topic, key, payload, state, attempt)
		SELECT 'bulk.row', 'k' || (g % 50), '{}', 'dead', 5 FROM generate_series(1, 3000) AS g`); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := w.cli(t, "--progress-interval", "1ms", "replay", "--topic", "bulk.*", "--batch-size", "20")
	if code != 0 || strings.TrimSpace(out) != "replayed 3000 rows" {
		t.Fatalf("replay: exit %d, %q\n%s", code, out, errOut)
	}
	line := regexp.MustCompile(`(?m)^replay: (\d+)/3000 rows \(\d+%\), \d+ rows/s, `)
	found := line.FindAllStringSubmatch(errOut, -1)
	if len(found) < 2 || found[len(found)-1][1] != "3000" {
		t.Fatalf("progress lines %v, want some ending with 3000/3000 rows:\n%s", found, errOut)
	}
	code, _, errOut = w.cli(t, "--no-progress", "--progress-interval", "1ms", "replay", "--topic", "bulk.*", "--state", "sent")
	if code != 0 || strings.Contains(errOut, "rows/s") {
		t.Errorf("--no-progress: exit %d, progress written:\n%s", code, errOut)
	}
}

// TestReplayWithinTheDuplicateWindow: sent rows routed to JetStream and
// sent within the stream's duplicate window are not replayed without
// --yes: the warning says when the window ends, the exit is 1 and the rows
// stay sent. With --yes, or once the window has passed, they are replayed.
func TestReplayWithinTheDuplicateWindow(t *testing.T) {
	w := newWorld(t, 0)
	stream := w.stream.CachedInfo().Config.Name
	cfg := writeConfig(t, fmt.Sprintf(`database:
  url: %q
  outboxTable: %s.outbox
server:
  listen: ""
destinations:
  events:
    type: nats
    servers: [%q]
    subject: "%s.{{ topic }}"
    stream: %s
routes:
  - topicPattern: "**"
    destination: events
`, w.pg.URL, w.pg.Schema, w.natsURL, w.subject, stream))
	op := &opWorld{pool: w.pg.Pool, config: cfg}
	ctx := testenv.Context(t, 30*time.Second)
	sent := func(ago string) {
		t.Helper()
		if _, err := w.pg.Pool.Exec(ctx, `DELETE FROM outbox; INSERT INTO outbox (topic, payload, state, updated_at)
			SELECT 'order.paid', '{}', 'sent', now() - interval '`+ago+`' FROM generate_series(1, 3)`); err != nil {
			t.Fatal(err)
		}
	}
	count := func(state string) int {
		var n int
		_ = w.pg.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE state = $1`, state).Scan(&n)
		return n
	}
	sent("0 seconds")
	code, out, errOut := op.cli(t, "replay", "--state", "sent", "--topic", "order.*", "-o", "json")
	if code != 1 || !strings.Contains(errOut, "duplicate window of 2m0s: it ends at") || !strings.Contains(errOut, "--yes") || count("sent") != 3 {
		t.Fatalf("within the window: exit %d, %d rows still sent, want 1 and 3\n%s", code, count("sent"), errOut)
	}
	var rep replayJSON
	if err := json.Unmarshal([]byte(out), &rep); err != nil || !rep.Refused || rep.Replayed != 0 || len(rep.JetStream) != 1 ||
		!rep.JetStream[0].Open || rep.JetStream[0].EndsAt == nil || rep.JetStream[0].Stream != stream || rep.JetStream[0].Rows != 3 {
		t.Fatalf("refused replay's report: %v %+v\n%s", err, rep, out)
	}
	if code, out, _ := op.cli(t, "replay", "--state", "sent", "--topic", "order.*", "--dry-run"); code != 0 || !strings.Contains(out, "would replay 3 rows") {
		t.Errorf("dry run within the window: exit %d, %q", code, out)
	}
	if code, out, errOut := op.cli(t, "replay", "--state", "sent", "--topic", "order.*", "--yes"); code != 0 || strings.TrimSpace(out) != "replayed 3 rows" || !strings.Contains(errOut, "replaying anyway") {
		t.Fatalf("--yes: exit %d, %q\n%s", code, out, errOut)
	}
	sent("3 minutes")
	code, out, errOut = op.cli(t, "replay", "--state", "sent", "--topic", "order.*")
	if code != 0 || strings.TrimSpace(out) != "replayed 3 rows" || bytes.Contains([]byte(errOut), []byte("warning")) {
		t.Fatalf("after the window: exit %d, %q\n%s", code, out, errOut)
	}
}

// TestMigrateUpJSONAndProgress: migrate up on an empty schema applies every
// bundled migration, shows its progress on stderr and reports them as JSON;
// status then lists them applied.
func TestMigrateUpJSONAndProgress(t *testing.T) {
	pg := testenv.Postgres(t, testenv.WithoutMigrations())
	w := &opWorld{pool: pg.Pool, config: writeConfig(t, "database:\n  url: \""+pg.URL+"\"\nserver:\n  listen: \"\"\n"+
		"destinations:\n  hooks:\n    type: http\n    url: http://127.0.0.1:1/hooks\nroutes:\n  - topicPattern: \"**\"\n    destination: hooks\n")}
	code, out, errOut := w.cli(t, "--progress-interval", "1ms", "migrate", "up", "-o", "json")
	if code != 0 {
		t.Fatalf("migrate up: exit %d\n%s", code, errOut)
	}
	var up migrateUpJSON
	if err := json.Unmarshal([]byte(out), &up); err != nil || len(up.Applied) < 3 || up.Version != up.Applied[len(up.Applied)-1].Version {
		t.Fatalf("migrate up -o json: %v %+v", err, up)
	}
	total := len(up.Applied)
	if !strings.Contains(errOut, fmt.Sprintf("migrate: %d/%d migrations (100%%)", total, total)) {
		t.Errorf("migrate up's progress does not end with %d of %d migrations:\n%s", total, total, errOut)
	}
	code, out, _ = w.cli(t, "migrate", "status", "-o", "json")
	var st migrateStatusJSON
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st.Migrations) != total {
		t.Fatalf("migrate status -o json: exit %d, %v, %+v", code, err, st)
	}
	for _, m := range st.Migrations {
		if m.State != "applied" || m.AppliedAt == nil {
			t.Errorf("after up: %+v", m)
		}
	}
}
