package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/*.bad.yaml.err from the current output")

// testEnv is the only environment the golden tests see.
func testEnv(name string) (string, bool) {
	env := map[string]string{
		"DATABASE_URL": "postgres://queuebox:env-secret@127.0.0.1:5432/queuebox",
	}
	v, ok := env[name]
	return v, ok
}

func TestBadConfigs(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*.bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no testdata/*.bad.yaml")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".bad.yaml"), func(t *testing.T) {
			t.Parallel()
			_, err := load(file, testEnv)
			if err == nil {
				t.Fatalf("%s loaded without error", file)
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error is %T, not Errors: %v", err, err)
			}
			got := err.Error() + "\n"
			golden := file + ".err"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./config -run TestBadConfigs -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("error for %s:\n got: %s\nwant: %s", file, got, want)
			}
			if strings.Contains(got, "secret@") || strings.Contains(got, "env-secret") {
				t.Errorf("error text contains a secret: %s", got)
			}
		})
	}
}

func TestGoodConfig(t *testing.T) {
	t.Parallel()
	cfg, err := load("testdata/good.yaml", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Warnings(); len(got) != 0 {
		t.Errorf("warnings: %q", got)
	}
	want := &Config{
		Database: Database{
			Type:        "postgresql",
			URL:         "postgres://queuebox:secret@127.0.0.1:5432/queuebox?sslmode=disable",
			OutboxTable: "messaging.outbox",
			Columns:     map[string]string{"aggregateType": "kind"},
			States:      map[string]string{"dead": "failed"},
			MaxConns:    8, SynchronousCommit: "off",
		},
		Relay: Relay{
			BatchSize: 50, MaxInflight: 150, Concurrency: 8,
			PollInterval: Duration(250 * time.Millisecond), MaxPollInterval: Duration(time.Second), Lease: Duration(time.Minute), MaxAttempts: 7,
			Backoff:         Backoff{Base: Duration(500 * time.Millisecond), Max: Duration(2 * time.Minute), Jitter: 0.1},
			ShutdownTimeout: Duration(20 * time.Second), ReapInterval: Duration(5 * time.Second), OnDead: "hold", ClaimMode: "auto", ClaimTurns: "table",
			CircuitBreaker: Breaker{Failures: 5, OpenFor: Duration(5 * time.Second), MaxOpenFor: Duration(30 * time.Second)},
		},
		Server: Server{Listen: "0.0.0.0:9091", Readiness: ReadinessStrict},
		Log:    Log{Format: "json", Level: "debug"},
		Destinations: map[string]Destination{
			"events": {
				Type: "nats", Servers: []string{"nats://127.0.0.1:4222", "nats://127.0.0.1:4223"},
				SubjectFrom: "topic", Stream: "EVENTS", StreamCreate: true, StreamSubjects: []string{"order.>"},
				Token: "s3cr3t-nats-token", Timeout: Duration(10 * time.Second), TLS: &TLS{CAFile: "/etc/queuebox/ca.pem"},
			},
			"hooks": {
				Type: "http", URL: "https://hooks.example.com/in/{{ topic }}", Timeout: Duration(5 * time.Second), Concurrency: 4,
				Headers: map[string]string{"X-Source": "queuebox", "X-Api-Key": "k3y-for-hooks"},
				Auth:    &Auth{Bearer: "b3arer-token-value"},
			},
			"ledger": {
				Type: "kafka", Brokers: []string{"127.0.0.1:9092"}, TopicFrom: "aggregate_type", Key: "{{ key }}",
				Timeout: Duration(10 * time.Second),
			},
			"billing": {
				Type: "amqp", URL: "amqp://guest:gu3st-pass@127.0.0.1:5672/", Exchange: "billing.{{ aggregateType }}",
				ExchangeType: "direct", RoutingKey: "{{ topic }}", Timeout: Duration(10 * time.Second),
				TLS: &TLS{CAFile: "/etc/queuebox/ca.pem"},
			},
		},
		Routes: []Route{
			{TopicPattern: "order.**", Destination: "events"},
			{TopicPattern: "invoice.*", Destination: "ledger"},
			{TopicPattern: "payment.*", Destination: "billing"},
			{TopicPattern: "**", Destination: "hooks"},
		},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("got  %#v\nwant %#v", cfg, want)
	}
	addr := map[string]string{
		"events":  "{{ topic }}",
		"hooks":   "https://hooks.example.com/in/{{ topic }}",
		"ledger":  "{{ aggregateType }}",
		"billing": "billing.{{ aggregateType }}",
	}
	for name, want := range addr {
		if got := cfg.Destinations[name].AddressTemplate(); got != want {
			t.Errorf("%s.AddressTemplate() = %q, want %q", name, got, want)
		}
	}
}

const minimal = `
database:
  url: postgres://u:pw@db/app
destinations:
  events:
    type: nats
    servers: [nats://127.0.0.1:4222]
    subject: "{{ topic }}"
routes:
  - topicPattern: "**"
    destination: events
`

func TestDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(minimal), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Relay.ReapInterval = Duration(5 * time.Second)
	want.Relay.MaxInflight = 1000
	if !reflect.DeepEqual(cfg.Relay, want.Relay) {
		t.Errorf("relay = %+v, want %+v", cfg.Relay, want.Relay)
	}
	checks := map[string][2]any{
		"database.type":        {cfg.Database.Type, "postgresql"},
		"database.outboxTable": {cfg.Database.OutboxTable, "outbox"},
		"relay.batchSize":      {cfg.Relay.BatchSize, 100},
		"relay.concurrency":    {cfg.Relay.Concurrency, 0},
		"relay.maxInflight":    {cfg.Relay.MaxInflight, 1000},
		"relay.pollInterval":   {cfg.Relay.PollInterval.D(), 100 * time.Millisecond},
		"relay.lease":          {cfg.Relay.Lease.D(), 30 * time.Second},
		"relay.maxAttempts":    {cfg.Relay.MaxAttempts, 5},
		"backoff.base":         {cfg.Relay.Backoff.Base.D(), time.Second},
		"backoff.max":          {cfg.Relay.Backoff.Max.D(), time.Minute},
		"backoff.jitter":       {cfg.Relay.Backoff.Jitter, 0.25},
		"shutdownTimeout":      {cfg.Relay.ShutdownTimeout.D(), 10 * time.Second},
		"onDead":               {cfg.Relay.OnDead, "release"},
		"claimTurns":           {cfg.Relay.ClaimTurns, "table"},
		"server.listen":        {cfg.Server.Listen, "127.0.0.1:9090"},
		"server.readiness":     {cfg.Server.Readiness, "database"},
		"log.format":           {cfg.Log.Format, "text"},
		"log.level":            {cfg.Log.Level, "info"},
		"events.timeout":       {cfg.Destinations["events"].Timeout.D(), 10 * time.Second},
	}
	for name, c := range checks {
		if c[0] != c[1] {
			t.Errorf("%s = %v, want %v", name, c[0], c[1])
		}
	}

	// reapInterval follows a short lease; kafka and amqp get their defaults.
	cfg, err = Parse([]byte(minimal+`
relay:
  lease: 4s
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Relay.ReapInterval.D(); got != 2*time.Second {
		t.Errorf("reapInterval with a 4s lease = %v, want 2s", got)
	}
	cfg, err = Parse([]byte(`
database: {url: "postgres://db/app"}
destinations:
  k: {type: kafka, brokers: ["b:9092"], topicFrom: topic}
  a: {type: amqp, url: "amqp://h/", exchangeFrom: key}
routes:
  - {topicPattern: "a.**", destination: k}
  - {topicPattern: "**", destination: a}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if k := cfg.Destinations["k"]; k.Key != "{{ key }}" || k.AddressTemplate() != "{{ topic }}" {
		t.Errorf("kafka = %+v", k)
	}
	if a := cfg.Destinations["a"]; a.RoutingKey != "{{ topic }}" || a.ExchangeType != "topic" || a.AddressTemplate() != "{{ key }}" {
		t.Errorf("amqp = %+v", a)
	}
}

func TestExplicitZeroIsNotDefaulted(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(minimal+"relay:\n  batchSize: 0\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "relay.batchSize: must be positive, got 0") {
		t.Errorf("err = %v", err)
	}
	// An empty section keeps the defaults.
	cfg, err := Parse([]byte(minimal+"relay:\nserver:\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Relay.BatchSize != 100 || cfg.Server.Listen != "127.0.0.1:9090" {
		t.Errorf("empty sections lost the defaults: %+v %+v", cfg.Relay, cfg.Server)
	}
}

func TestEnvExpansion(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DB": "postgres://u:p@db/app", "EMPTY": "", "BATCH": "250", "SUBJ": "events"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	src := `
# ${NOT_SET} in a comment is left alone
database:
  url: ${DB}
  outboxTable: ${TABLE:-outbox_v2}   # default when unset
relay:
  batchSize: ${BATCH}
  onDead: ${EMPTY:-hold}             # default when empty
destinations:
  events:
    type: nats
    servers: ["nats://127.0.0.1:4222"]
    subject: "${SUBJ}.{{ topic }}.$$x"
routes:
  - {topicPattern: "**", destination: events}
`
	cfg, err := Parse([]byte(src), lookup)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Database.URL != env["DB"] || cfg.Database.OutboxTable != "outbox_v2" || cfg.Relay.BatchSize != 250 ||
		cfg.Relay.OnDead != "hold" || cfg.Destinations["events"].Subject != "events.{{ topic }}.$x" {
		t.Errorf("expansion wrong: %+v %+v %+v", cfg.Database, cfg.Relay, cfg.Destinations["events"])
	}
}

func TestEnvExpansionErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ src, want string }{
		{"a: ${NOPE}\nb: ${ALSO}\n", "1:4: environment variable NOPE is not set (use ${NOPE:-default} to give a default)\n" +
			"2:4: environment variable ALSO is not set (use ${ALSO:-default} to give a default)"},
		{"a: ${1BAD}\n", `1:4: invalid variable name in "${1BAD}" (want ${NAME} or ${NAME:-default}; write $$ for a literal $)`},
		{"a: ${OPEN\n", `1:4: unclosed "${" (write $$ for a literal $)`},
		{"a: ${MULTI}\n", "1:4: environment variable MULTI contains a line break, which a configuration value cannot hold"},
	}
	lookup := func(k string) (string, bool) {
		if k == "MULTI" {
			return "a\nb", true
		}
		return "", false
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.src), lookup)
		if err == nil || err.Error() != tt.want {
			t.Errorf("Parse(%q) error:\n got %v\nwant %s", tt.src, err, tt.want)
		}
	}
}

// Columns of errors after an expansion point at the file as written.
func TestErrorColumnsAfterExpansion(t *testing.T) {
	t.Parallel()
	src := "relay: {lease: ${L}, batchSize: x}\n"
	_, err := Parse([]byte(src), func(string) (string, bool) { return "30s", true })
	want := `1:33: relay.batchSize: expected an integer, got "x"`
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
}

func TestWarnings(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(minimal+`  - topicPattern: "order.*"
    destination: spare
destinations:
  spare:
    type: http
    url: http://127.0.0.1/x
  unused:
    type: http
    url: http://127.0.0.1/y
`), nil)
	if err == nil {
		t.Fatal("a second destinations key must be a duplicate-key error")
	}
	cfg, err := Parse([]byte(`
database: {url: "postgres://db/app"}
destinations:
  events: {type: nats, servers: ["nats://h:4222"], subject: "{{ topic }}"}
  unused: {type: http, url: "http://127.0.0.1/y"}
routes:
  - {topicPattern: "order.**", destination: events}
  - {topicPattern: "order.created", destination: events}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`5:3: destinations.unused: not used by any route`,
		`8:5: routes[1]: never matches: routes[0] ("order.**") takes every topic of "order.created" first`,
	}
	if got := cfg.Warnings(); !reflect.DeepEqual(got, want) {
		t.Errorf("warnings:\n got %q\nwant %q", got, want)
	}
}

func TestRedacted(t *testing.T) {
	t.Parallel()
	cfg, err := load("testdata/good.yaml", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{"secret@", "s3cr3t-nats-token", "k3y-for-hooks", "b3arer-token-value", "gu3st-pass"}
	text := cfg.String()
	for _, s := range secrets {
		if strings.Contains(text, s) {
			t.Errorf("String() contains %q:\n%s", s, text)
		}
	}
	for _, s := range []string{"postgres://queuebox:xxxxx@127.0.0.1:5432/queuebox", "amqp://guest:xxxxx@127.0.0.1:5672/", "X-Source: queuebox", "lease: 1m0s"} {
		if !strings.Contains(text, s) {
			t.Errorf("String() lacks %q:\n%s", s, text)
		}
	}
	// Redacted is a copy: the original keeps its secrets.
	if cfg.Destinations["hooks"].Auth.Bearer != "b3arer-token-value" || cfg.Destinations["hooks"].Headers["X-Api-Key"] != "k3y-for-hooks" {
		t.Error("Redacted changed the original")
	}
	got := cfg.Secrets()
	for _, s := range []string{"secret", "s3cr3t-nats-token", "k3y-for-hooks", "b3arer-token-value", "gu3st-pass"} {
		if !contains(got, s) {
			t.Errorf("Secrets() = %q lacks %q", got, s)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestSecretsFromKeywordDSN(t *testing.T) {
	t.Parallel()
	c := &Config{Database: Database{URL: "host=db user=app password=hunter22 dbname=x"}}
	if got := c.Secrets(); !contains(got, "hunter22") {
		t.Errorf("Secrets() = %q", got)
	}
	if s := c.String(); strings.Contains(s, "hunter22") {
		t.Errorf("String() leaks: %s", s)
	}
}

func TestExampleConfigLoads(t *testing.T) {
	t.Parallel()
	path := filepath.Join("..", "config.example.yaml")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no %s", path)
	}
	cfg, err := load(path, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Destinations) == 0 || len(cfg.Routes) == 0 {
		t.Errorf("example has no destinations or routes")
	}
	if w := cfg.Warnings(); len(w) > 0 {
		t.Errorf("example has warnings: %q", w)
	}
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	var d Duration
	if err := d.UnmarshalText([]byte("250ms")); err != nil || d.D() != 250*time.Millisecond {
		t.Errorf("UnmarshalText = %v, %v", d, err)
	}
	err := d.UnmarshalText([]byte("30"))
	if err == nil || err.Error() != `invalid duration "30": time: missing unit in duration "30" (write e.g. 30s)` {
		t.Errorf("err = %v", err)
	}
	if b, _ := Duration(90 * time.Second).MarshalText(); string(b) != "1m30s" {
		t.Errorf("MarshalText = %s", b)
	}
}

func FuzzParse(f *testing.F) {
	for _, glob := range []string{"testdata/*.yaml", "../config.example.yaml"} {
		files, _ := filepath.Glob(glob)
		for _, file := range files {
			if data, err := os.ReadFile(file); err == nil {
				f.Add(data)
			}
		}
	}
	f.Add([]byte(minimal))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data, testEnv)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error text")
			}
			return
		}
		_ = cfg.String()
		_ = cfg.Warnings()
		for _, d := range cfg.Destinations {
			_ = d.AddressTemplate()
		}
	})
}

func TestMergeKeyBombIsBounded(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("x0: &a0 {type: nats}\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "x%d: &a%d {<<: [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]}\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	b.WriteString("destinations:\n  d:\n    <<: *a9\n")
	start := time.Now()
	_, err := Parse([]byte(b.String()), nil)
	if err == nil || !strings.Contains(err.Error(), "merge keys (<<) expand to more than") {
		t.Errorf("err = %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Parse took %v", d)
	}
}

func TestMergeKeys(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(`
database: {url: "postgres://db/app"}
destinations:
  a: &base {type: http, url: "http://h/a", timeout: 3s}
  b:
    <<: *base
    url: http://h/b
routes:
  - {topicPattern: "a.**", destination: a}
  - {topicPattern: "**", destination: b}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b := cfg.Destinations["b"]; b.Type != "http" || b.URL != "http://h/b" || b.Timeout.D() != 3*time.Second {
		t.Errorf("b = %+v", b)
	}
}

func TestRouteExpressions(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(`
database: {url: "postgres://db/app"}
destinations:
  a: {type: http, url: "http://h/a"}
  b: {type: http, url: "http://h/b"}
routes:
  - topicPattern: "order.**"
    destination: a
    when: payload.region == "eu" && headers["tenant"] != ""
    transform: '{"id": id, "data": omit(payload, "card")}'
    onError: retry
  - topicPattern: "order.*"
    destination: b
    transform: payload.order
    onError: skip
  - topicPattern: "order.created"
    destination: b
  - topicPattern: "**"
    destination: b
    onError: skip
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Routes[0]
	if r.When != `payload.region == "eu" && headers["tenant"] != ""` || r.Transform == "" || r.OnError != "retry" {
		t.Errorf("routes[0] = %+v", r)
	}
	// routes[0] has a when: and routes[1] skips on error: neither hides
	// routes[2]. routes[3].onError does nothing.
	want := []string{`20:5: routes[3].onError: has no effect: the route has no when: or transform:`}
	if got := cfg.Warnings(); !reflect.DeepEqual(got, want) {
		t.Errorf("warnings = %q, want %q", got, want)
	}
	// The effective configuration prints the expressions, and no empty
	// ones (an empty when: is an error).
	if s := cfg.String(); !strings.Contains(s, "transform: payload.order") || strings.Contains(s, `when: ""`) {
		t.Errorf("String() =\n%s", s)
	}
}

// TestSharedColumns: two logical columns on one physical column are an
// error at the key that maps it, whether the other maps it explicitly or
// by its default name; a monotonic id serving as the sequence is not.
func TestSharedColumns(t *testing.T) {
	t.Parallel()
	base := "database:\n  url: postgres://h/db\n  outboxTable: events\n  columns:\n%sdestinations:\n  n:\n    type: nats\n    servers: [nats://h:4222]\n    subject: s\nroutes:\n  - topicPattern: \"**\"\n    destination: n\n"
	tests := []struct {
		columns, want string
	}{
		{"    createdAt: created\n    updatedAt: created\n", `6:5: database.columns.updatedAt: maps to column "created", which createdAt also maps to` + "\n"},
		{"    updatedAt: created_at\n", `5:5: database.columns.updatedAt: maps to column "created_at", which createdAt also maps to by default (map createdAt to its own column, or declare it absent with createdAt: "")` + "\n"},
		{"    key: topic\n", `5:5: database.columns.key: maps to column "topic", which topic also maps to by default (map topic to its own column)` + "\n"},
		{"    sequence: id\n", ""},
		{"    id: event_no\n    sequence: event_no\n", ""},
		{"    sent_at: updated_at\n", `5:5: database.columns.sentAt: maps to column "updated_at", which updatedAt also maps to by default (map updatedAt to its own column, or declare it absent with updatedAt: "")` + "\n"},
		{"    sentAt: updated_at\n    updatedAt: \"\"\n", ""},
	}
	for _, tt := range tests {
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, []byte(fmt.Sprintf(base, tt.columns)), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := load(path, testEnv)
		got := ""
		if err != nil {
			got = strings.TrimPrefix(err.Error()+"\n", path+":")
		}
		if got != tt.want {
			t.Errorf("columns\n%s got:  %q\nwant: %q", tt.columns, got, tt.want)
		}
	}
}

// TestAbsentColumns: a column mapped to null, ~ or "" is absent; a required
// one cannot be; processing may be absent.
func TestAbsentColumns(t *testing.T) {
	t.Parallel()
	withDB := func(extra string) []byte {
		return []byte(strings.Replace(minimal, "  url: postgres://u:pw@db/app\n", "  url: postgres://u:pw@db/app\n"+extra, 1))
	}
	cfg, err := Parse(withDB("  columns: {headers: null, aggregate_type: ~, key: \"\", id: event_id}\n  states: {processing: ~}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"headers": "", "aggregateType": "", "key": "", "id": "event_id"}
	if !reflect.DeepEqual(cfg.Database.Columns, want) {
		t.Fatalf("columns = %v, want %v", cfg.Database.Columns, want)
	}
	if _, err := Parse(withDB("  columns: {topic: null}\n"), nil); err == nil || !strings.Contains(err.Error(), "database.columns.topic") {
		t.Fatalf("absent topic: err = %v", err)
	}
}

// TestTypeErrorsHideValuesFromTheEnvironment: a value that came from
// ${VAR} is not quoted in a type error (servers: ${NATS_URL} without the
// brackets printed the URL with its password); a literal one still is.
func TestTypeErrorsHideValuesFromTheEnvironment(t *testing.T) {
	t.Parallel()
	env := map[string]string{"NATS_URL": "nats://relay:hunter2@nats:4222", "HOOK_TOKEN": "s3cr3t-token"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	src := strings.Replace(minimal, "servers: [nats://127.0.0.1:4222]", "servers: ${NATS_URL}", 1) + `
relay:
  batchSize: ${HOOK_TOKEN}
  lease: soon
  pollInterval: ${HOOK_TOKEN}
`
	_, err := Parse([]byte(src), lookup)
	if err == nil {
		t.Fatal("Parse accepted a string for a list and an integer")
	}
	// A value with a backslash inside double quotes (escaped for YAML, and
	// read back as the variable holds it) is hidden too.
	bs := func(string) (string, bool) { return `nats://relay:hun\ter2@nats:4222`, true }
	_, err2 := Parse([]byte(strings.Replace(minimal, "servers: [nats://127.0.0.1:4222]", `servers: "${NATS_URL}"`, 1)), bs)
	if err2 == nil || strings.Contains(err2.Error(), "hun") || !strings.Contains(err2.Error(), "not shown") {
		t.Errorf("quoted value with a backslash: %v; want it hidden", err2)
	}
	// A scalar over several lines, the variable on a later one.
	for _, multi := range []string{"servers: >-\n      ${NATS_URL}", "servers: nats://a,\n      ${NATS_URL}"} {
		_, err := Parse([]byte(strings.Replace(minimal, "servers: [nats://127.0.0.1:4222]", multi, 1)), lookup)
		if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "not shown") {
			t.Errorf("%q: %v; want the value hidden", multi, err)
		}
	}
	msg := err.Error()
	for _, secret := range env {
		if strings.Contains(msg, secret) {
			t.Errorf("error shows %q: %s", secret, msg)
		}
	}
	for _, want := range []string{"servers: expected a list, got a value from the environment (not shown)", "batchSize: expected an integer, got a value from the environment (not shown)", `lease: invalid duration "soon"`,
		"pollInterval: expected a duration such as 30s, got a value from the environment (not shown)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q: %s", want, msg)
		}
	}
}

// TestInflightBatchesIsReadAsMaxInflight: the key of the earlier engine
// still loads, as the rows in flight it allowed, with a warning that names
// the key that replaces it; maxInflight wins when both are set.
func TestInflightBatchesIsReadAsMaxInflight(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(minimal+"relay:\n  batchSize: 50\n  inflightBatches: 3\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	w := cfg.Warnings()
	if cfg.Relay.MaxInflight != 150 || len(w) != 1 || !strings.Contains(w[0], "relay.inflightBatches: is read as relay.maxInflight: 150") {
		t.Errorf("maxInflight %d, warnings %q; want 150 and one warning naming relay.maxInflight", cfg.Relay.MaxInflight, w)
	}
	cfg, err = Parse([]byte(minimal+"relay:\n  maxInflight: 400\n  inflightBatches: 3\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Relay.MaxInflight != 400 {
		t.Errorf("maxInflight %d with both keys set, want 400", cfg.Relay.MaxInflight)
	}
	if _, err := Parse([]byte(minimal+"relay:\n  maxInflight: 10\n"), nil); err == nil || !strings.Contains(err.Error(), "relay.maxInflight: must be at least relay.batchSize (100), got 10") {
		t.Errorf("maxInflight below batchSize: err = %v", err)
	}
}

// TestQuotedExpansionKeepsTheValue: inside quotes an expanded value is the
// variable's text exactly, whatever backslashes or quotes it holds.
func TestQuotedExpansionKeepsTheValue(t *testing.T) {
	t.Parallel()
	pw := `s3cr\et"'x`
	lookup := func(string) (string, bool) { return pw, true }
	for _, quoted := range []string{`"postgres://u:${PW}@db/app"`, `'postgres://u:${PW}@db/app'`} {
		src := strings.Replace(minimal, "url: postgres://u:pw@db/app", "url: "+quoted, 1)
		cfg, err := Parse([]byte(src), lookup)
		if err != nil {
			t.Fatalf("%s: %v", quoted, err)
		}
		if want := "postgres://u:" + pw + "@db/app"; cfg.Database.URL != want {
			t.Errorf("%s: url %q, want %q", quoted, cfg.Database.URL, want)
		}
	}
}

// TestDefaultsFollowTheFilesValues: a default that a value of the file
// would contradict follows it instead of failing on a key the file never
// wrote; values the file does write are still checked.
func TestDefaultsFollowTheFilesValues(t *testing.T) {
	t.Parallel()
	src := minimal + `relay:
  pollInterval: 2s
  backoff: {base: 2m}
  circuitBreaker: {openFor: 1m}
  lease: 1ns
`
	cfg, err := Parse([]byte(src), nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	r := cfg.Relay
	if r.MaxPollInterval.D() != 2*time.Second || r.Backoff.Max.D() != 2*time.Minute || r.CircuitBreaker.MaxOpenFor.D() != time.Minute || r.ReapInterval <= 0 {
		t.Errorf("derived maxPollInterval %v, backoff.max %v, maxOpenFor %v, reapInterval %v", r.MaxPollInterval.D(), r.Backoff.Max.D(), r.CircuitBreaker.MaxOpenFor.D(), r.ReapInterval.D())
	}
	_, err = Parse([]byte(minimal+"relay:\n  pollInterval: 2s\n  maxPollInterval: 1s\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "relay.maxPollInterval: must be at least relay.pollInterval") {
		t.Errorf("a written maxPollInterval below pollInterval: %v, want the error", err)
	}
}

// TestRetentionAndNotifyAreValidated: a negative retention value silently
// kept rows forever (maxAge) or fell back to a default; wake on commit on
// SQL Server passed check and then failed run.
func TestRetentionAndNotifyAreValidated(t *testing.T) {
	t.Parallel()
	for src, want := range map[string]string{
		minimal + "retention:\n  sent: {maxAge: -1h}\n": "retention.sent.maxAge: must be 0",
		minimal + "retention:\n  interval: -1s\n":       "retention.interval: must be 0",
		minimal + "retention:\n  batchSize: -5\n":       "retention.batchSize: must be 0",
		strings.Replace(minimal, "database:\n", "database:\n  type: sqlserver\n", 1) + "relay:\n  notify: {channel: qb}\n": "relay.notify: wake on commit needs database.type postgresql",
		minimal + "relay:\n  notify: {createTrigger: true}\n":                                                              "relay.notify.createTrigger: needs relay.notify.channel",
	} {
		if _, err := Parse([]byte(src), nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error containing %q", src, err, want)
		}
	}
}

// TestRowPolicyKeys: allowHeaders on every type, subjectTokens,
// routingKeyTokens and allowedHosts are read; allowedHosts beside a
// literal host only warns.
func TestRowPolicyKeys(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(`
database: {url: "postgres://db/app"}
destinations:
  events: {type: nats, servers: ["nats://h:4222"], subject: "events.{{ key }}", subjectTokens: allow, allowHeaders: [Nats-TTL]}
  billing: {type: amqp, url: "amqp://h/", exchange: billing, routingKey: "{{ payload.region }}", routingKeyTokens: single, allowHeaders: [x-delay, CC]}
  ledger: {type: kafka, brokers: ["h:9092"], topic: ledger, allowHeaders: [tenant]}
  tenants: {type: http, url: "https://{{ payload.tenant }}.hooks.example.com/x", allowedHosts: ["*.hooks.example.com", "hooks.example.com:8443"]}
  hooks: {type: http, url: "http://h/x", allowedHosts: [h], allowHeaders: [Proxy-Authorization]}
routes:
  - {topicPattern: "order.**", destination: events}
  - {topicPattern: "payment.**", destination: billing}
  - {topicPattern: "invoice.**", destination: ledger}
  - {topicPattern: "tenant.**", destination: tenants}
  - {topicPattern: "**", destination: hooks}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Destinations
	if d["events"].SubjectTokens != "allow" || d["billing"].RoutingKeyTokens != "single" ||
		!reflect.DeepEqual(d["billing"].AllowHeaders, []string{"x-delay", "CC"}) || !reflect.DeepEqual(d["ledger"].AllowHeaders, []string{"tenant"}) ||
		!reflect.DeepEqual(d["tenants"].AllowedHosts, []string{"*.hooks.example.com", "hooks.example.com:8443"}) {
		t.Errorf("destinations %+v", d)
	}
	if w := cfg.Warnings(); len(w) != 1 || !strings.Contains(w[0], "destinations.hooks.allowedHosts: has no effect") {
		t.Errorf("warnings %q", w)
	}
	r := cfg.Redacted()
	r.Destinations["tenants"].AllowedHosts[0] = "changed"
	if cfg.Destinations["tenants"].AllowedHosts[0] == "changed" {
		t.Error("Redacted shares allowedHosts with the original")
	}
}

// TestFileSizeLimit: a file above 1 MiB is refused before it is parsed,
// with its size and the limit; one just under is read.
func TestFileSizeLimit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good, err := os.ReadFile("testdata/good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pad := func(n int) []byte {
		return append(append([]byte(nil), good...), ("#" + strings.Repeat("x", n-len(good)-2) + "\n")...)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, pad(MaxFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(big)
	if err == nil || !strings.Contains(err.Error(), "1048577 bytes") || !strings.Contains(err.Error(), "limit of 1048576 bytes") || !strings.Contains(err.Error(), big) {
		t.Errorf("Load of a file of 1 MiB + 1 byte: %v", err)
	}
	if _, err := Parse(pad(MaxFileBytes+1), nil); err == nil || !strings.Contains(err.Error(), "1048577 bytes") {
		t.Errorf("Parse of 1 MiB + 1 byte: %v", err)
	}
	fits := filepath.Join(dir, "fits.yaml")
	if err := os.WriteFile(fits, pad(MaxFileBytes), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := load(fits, func(string) (string, bool) { return "", false }); err != nil && strings.Contains(err.Error(), "limit") {
		t.Errorf("a file of exactly 1 MiB: %v", err)
	}
}
