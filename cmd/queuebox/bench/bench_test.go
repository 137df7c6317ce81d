package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/config"
	"github.com/queuebox/queuebox/internal/testenv"
)

// TestSmoke runs a tiny bench (2,000 rows, NATS keyed, RabbitMQ unkeyed and
// Kafka keyed on an in-process kfake cluster, one replica of the freshly built binary) and checks only that it
// completes with every row delivered and figures that make sense. No timing
// assertions: this machine is shared.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and drains 2,000 rows twice")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	o, ok := smokeOptions(ctx, t)
	if !ok {
		return
	}
	amqpURL := testenv.AMQPURL(t)
	kafka := testenv.Kafka(t, nil)
	o.Cases = []string{"nats-keyed", "amqp-unkeyed", "kafka-keyed"}
	o.AMQPURL = amqpURL
	o.KafkaBrokers = strings.Join(kafka.Brokers, ",")
	o.IdleWindow = time.Second
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed() || len(rep.Drains) != 3 {
		t.Fatalf("bench did not complete: %+v", rep)
	}
	for _, d := range rep.Drains {
		if len(d.Relay) != 1 {
			t.Fatalf("%s: %d relay runs, want 1", d.Case, len(d.Relay))
		}
		rr := d.Relay[0]
		t.Logf("%s: bare %.0f rows/s, relay %.0f rows/s (%.2f)", d.Case, d.Bare, rr.RowsPerSec, rr.Ratio)
		if d.Bare <= 0 || rr.RowsPerSec <= 0 || rr.Ratio <= 0 || rr.CPUPer10k <= 0 || rr.PeakRSSMiB <= 0 {
			t.Errorf("%s: figures not positive: bare %v, relay %+v", d.Case, d.Bare, rr)
		}
		if rr.IdleQPS < 0 || rr.IdleCPU < 0 {
			t.Errorf("%s: negative idle cost: %+v", d.Case, rr)
		}
		// Every drain sleeps and wakes something (a publish waits for its
		// ack): no context switches means /proc/stat was not read.
		if rr.SwitchesPerRow <= 0 || d.BareSwitches <= 0 {
			t.Errorf("%s: no context switches counted: bare %v, relay %v", d.Case, d.BareSwitches, rr.SwitchesPerRow)
		}
	}
}

// smokeOptions builds the binary and returns the options of a smoke run
// on the test PostgreSQL: 2,000 rows, one replica. ok is false when
// PostgreSQL is not there (the test is skipped, or failed when services
// are required).
func smokeOptions(ctx context.Context, t *testing.T) (o Options, ok bool) {
	t.Helper()
	pgURL := testenv.Env("QUEUEBOX_TEST_POSTGRES_URL", testenv.DefaultPostgresURL)
	if err := probePostgres(ctx, pgURL); err != nil {
		testenv.Unavailable(t, "PostgreSQL", err)
		return o, false
	}
	bin := filepath.Join(t.TempDir(), "queuebox")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/queuebox/queuebox/cmd/queuebox").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	o = Defaults()
	o.DatabaseURL = pgURL
	o.Binary = bin
	o.Rows, o.Keys, o.BatchSize = 2_000, 50, 100
	o.Replicas = []int{1}
	return o, true
}

// TestSmokeTraced drains with every row traced: each row's span reaches
// the bench's receiver, counted after the replica stopped.
func TestSmokeTraced(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and drains 2,000 rows")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	o, ok := smokeOptions(ctx, t)
	if !ok {
		return
	}
	o.Cases = []string{"nats-keyed"}
	o.Trace = true
	o.IdleWindow = time.Second
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed() || len(rep.Drains) != 1 || len(rep.Drains[0].Relay) != 1 || !rep.Traced {
		t.Fatalf("bench did not complete: %+v", rep)
	}
	rr := rep.Drains[0].Relay[0]
	t.Logf("traced: relay %.0f rows/s (%.2f), %d spans", rr.RowsPerSec, rr.Ratio, rr.Spans)
	if rr.Spans < int64(o.Rows) {
		t.Errorf("%d spans for %d rows", rr.Spans, o.Rows)
	}
}

func probePostgres(ctx context.Context, url string) error {
	w, err := openWorld(ctx, &Options{DatabaseURL: url, Database: Defaults().Database})
	if err != nil {
		return err
	}
	w.close()
	return nil
}

// TestReplicaConfigsListenOnce: with a management address (--cpu-profile),
// only the first replica may bind it; three replicas sharing one config
// failed at start with "address already in use".
func TestReplicaConfigsListenOnce(t *testing.T) {
	dir := t.TempDir()
	paths, err := replicaConfigs(dir, relayConfig{Listen: "127.0.0.1:9999", BatchSize: 100, Concurrency: 8, Dest: "nats"}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 3 {
		t.Fatalf("%d config paths, want 3", len(paths))
	}
	for i, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		has := strings.Contains(string(b), "127.0.0.1:9999")
		if has != (i == 0) {
			t.Errorf("replica %d: listens on the management address = %v, want %v:\n%s", i, has, i == 0, b)
		}
	}
}

// TestRelayConfigCarriesKnobs: the config written for the replicas is one
// the relay accepts, and it carries every relay setting the bench varies
// (--claim-mode, --claim-turns, --max-inflight, --synchronous-commit,
// --replica-gomaxprocs), from the options to the file; --concurrency caps
// an HTTP destination only, never a broker.
func TestRelayConfigCarriesKnobs(t *testing.T) {
	o := Options{BatchSize: 1000, Concurrency: 8, ClaimMode: "lease", ClaimTurns: "replica", MaxInflight: 3000,
		SyncCommit: "on", MaxProcs: 1}
	rc := o.replicaConfig("postgres://postgres@127.0.0.1:5432/x")
	rc.Dest, rc.NATSURL, rc.Subject = "nats", "nats://127.0.0.1:4222", "bench.t"
	if rc.MaxProcs != 1 {
		t.Errorf("--replica-gomaxprocs 1 did not reach the replicas' settings: MaxProcs %d", rc.MaxProcs)
	}
	cfg, err := config.Parse([]byte(rc.yaml()), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("the bench's relay config does not parse: %v\n%s", err, rc.yaml())
	}
	got := []string{cfg.Relay.ClaimMode, cfg.Relay.ClaimTurns, fmt.Sprint(cfg.Relay.MaxInflight),
		cfg.Database.SynchronousCommit, fmt.Sprint(cfg.Relay.BatchSize), fmt.Sprint(cfg.Relay.Concurrency)}
	want := []string{"lease", "replica", "3000", "on", "1000", "0"}
	if !slices.Equal(got, want) {
		t.Errorf("relay config carries %q, want %q", got, want)
	}
	rc.Dest, rc.HookURL = "http", "http://127.0.0.1:1/hook"
	if cfg, err = config.Parse([]byte(rc.yaml()), func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	if c := cfg.Destinations["bench"].Concurrency; c != 8 {
		t.Errorf("--concurrency 8 with an HTTP destination: its concurrency is %d, want 8", c)
	}
	rc.ClaimTurns, rc.ClaimMode, rc.MaxInflight, rc.SyncCommit = "", "", 0, ""
	if cfg, err = config.Parse([]byte(rc.yaml()), func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	if cfg.Relay.ClaimTurns != "table" {
		t.Errorf("without --claim-turns: claimTurns %q, want the relay's default, table", cfg.Relay.ClaimTurns)
	}
}

// TestReplicaGOMAXPROCS: --replica-gomaxprocs reaches the replica
// processes' environment, and without it they inherit the bench's.
func TestReplicaGOMAXPROCS(t *testing.T) {
	cmd := replicaCommand("queuebox", "c.yaml", relayConfig{MaxProcs: 1})
	if !slices.Contains(cmd.Env, "GOMAXPROCS=1") {
		t.Errorf("MaxProcs 1: the replica's environment has no GOMAXPROCS=1: %q", cmd.Env)
	}
	if cmd := replicaCommand("queuebox", "c.yaml", relayConfig{}); cmd.Env != nil {
		t.Errorf("MaxProcs 0: the replica's environment is set (%d entries), want the bench's", len(cmd.Env))
	}
}

// TestWorldLeavesNoTempFiles: the embedded NATS server's store is removed
// whole; removing only its StoreDir (a subdirectory) left an empty
// queuebox-bench-nats-* directory in the temp dir per run.
func TestWorldLeavesNoTempFiles(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	pgURL := testenv.Env("QUEUEBOX_TEST_POSTGRES_URL", testenv.DefaultPostgresURL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := probePostgres(ctx, pgURL); err != nil {
		testenv.Unavailable(t, "PostgreSQL", err)
		return
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("left in the temp dir: %s", e.Name())
	}
}
