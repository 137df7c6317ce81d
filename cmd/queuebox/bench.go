package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/queuebox/queuebox/cmd/queuebox/bench"
)

// newBenchCmd is `queuebox bench`: the throughput, latency and idle-cost
// benchmark against the local PostgreSQL and NATS (see docs/benchmarks.md).
// The logic lives in package bench beside this file; replicas are this binary's `run`.
func newBenchCmd(g *globalFlags) *cobra.Command {
	o := bench.Defaults()
	var (
		replicas string
		cases    string
		output   outputFormat
		quick    bool
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure drain throughput, commit-to-ack latency and idle cost against the bare claim-publish-complete loop",
		Long: `bench inserts rows into a fresh schema of the database queuebox_bench (created
when missing) and drains them with the bare claim-publish-complete loop and
with 'queuebox run' replicas of this binary, to JetStream (an embedded
nats-server unless --nats-url) and to an in-process HTTP receiver. It
prints relay ÷ bare for every case, commit-to-ack latency at a fixed offered
load with and without wake on commit, CPU per 10,000 rows, peak RSS and the
idle cost of a replica.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if o.Replicas, err = parseInts(replicas); err != nil {
				return usagef("--replicas: %v", err)
			}
			if cases != "" {
				o.Cases = strings.Split(cases, ",")
			}
			if quick {
				o = quickened(cmd, o)
			}
			if o.Binary, err = os.Executable(); err != nil {
				return err
			}
			prog := newBenchProgress(g, cmd.ErrOrStderr(), o)
			o.Progress = prog
			rep, err := bench.Run(cmd.Context(), o)
			prog.Finish()
			if err != nil {
				return err
			}
			if output.json() {
				err = rep.WriteJSON(cmd.OutOrStdout())
			} else {
				err = rep.WriteTable(cmd.OutOrStdout())
			}
			if err != nil {
				return err
			}
			if rep.Failed() {
				return bench.ErrIncomplete
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.DatabaseURL, "database-url", envOr("DATABASE_URL", o.DatabaseURL), "PostgreSQL server URL (env DATABASE_URL); the bench uses its own database on it")
	f.StringVar(&o.Database, "database", o.Database, "database the bench creates (when missing) and works in")
	f.StringVar(&o.AMQPURL, "amqp-url", o.AMQPURL, "RabbitMQ of the amqp cases; with all cases they are skipped when it does not answer")
	f.StringVar(&o.KafkaBrokers, "kafka-brokers", "", "Kafka brokers (host:port,...) of the kafka cases; empty: they are skipped (and fail when named in --cases)")
	f.StringVar(&o.NATSURL, "nats-url", "", "NATS server with JetStream; empty: an embedded nats-server on a random port")
	f.IntVar(&o.Rows, "rows", o.Rows, "rows per drain (the webhook case drains a tenth, the skewed case a fifth)")
	f.IntVar(&o.Keys, "keys", o.Keys, "distinct keys of the keyed and isolation cases")
	f.IntVar(&o.PayloadSize, "payload", o.PayloadSize, "payload bytes")
	f.IntVar(&o.BatchSize, "batch-size", o.BatchSize, "relay.batchSize, and the bare loop's batch")
	f.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "HTTP requests in flight: the bare loop's, and the relay's HTTP destination's concurrency (brokers keep the relay's defaults)")
	f.IntVar(&o.MaxInflight, "max-inflight", 0, "relay.maxInflight of the relay replicas (default: the relay's default, 10 × batch size)")
	f.StringVar(&o.ClaimMode, "claim-mode", "", "relay.claimMode of the relay replicas: lease (the default on the bundled table), lock or buckets")
	f.StringVar(&o.ClaimTurns, "claim-turns", "", "relay.claimTurns of the relay replicas: table or replica (default: the relay's default, table)")
	f.IntVar(&o.MaxProcs, "replica-gomaxprocs", 0, "GOMAXPROCS of the relay replica processes (default: Go's, one per CPU); see docs/operations.md on replicas sharing a small host")
	f.StringVar(&o.SyncCommit, "synchronous-commit", "", "database.synchronousCommit of the relay replicas (default: the relay's default, off; the bare loop always uses the server's)")
	f.IntVar(&o.Runs, "runs", o.Runs, "rounds per case (bare loop and relay each round); the report keeps the median ratio and shows its min–max: use 3 or more before reading a difference under ~10 %")
	f.StringVar(&replicas, "replicas", "1,3", "relay process counts to run, comma-separated")
	f.StringVar(&cases, "cases", "", "comma-separated subset of: "+strings.Join(bench.AllCases, ", ")+", or a destination (nats, http, amqp, kafka) for both of its cases (default all)")
	f.IntVar(&o.Rate, "rate", o.Rate, "offered load of the latency case, rows/s")
	f.DurationVar(&o.Duration, "duration", o.Duration, "length of the latency case")
	f.DurationVar(&o.IdleWindow, "idle-window", o.IdleWindow, "idle cost measurement window")
	f.StringVar(&o.ProfileDir, "cpu-profile", "", "directory for a CPU profile of the first relay replica of every drain (<case>-x<replicas>.pprof, via server.pprof); read with go tool pprof")
	f.BoolVar(&o.Trace, "trace", false, "trace every row of the drain and latency cases: the relay replicas export a span per row over OTLP/HTTP (OTEL_TRACES_EXPORTER=otlp, sampler always_on) to a receiver in the bench that counts and discards them; the bench's own OTEL_* variables are not passed on")
	f.BoolVar(&quick, "quick", false, "a smoke run: 5,000 rows, 100 keys, 3s latency and idle windows (explicit flags win)")
	addOutputFlag(cmd, &output)
	return cmd
}

// quickened applies --quick to the options the user did not set.
func quickened(cmd *cobra.Command, o bench.Options) bench.Options {
	q := bench.Quick(o)
	f := cmd.Flags()
	if !f.Changed("rows") {
		o.Rows = q.Rows
	}
	if !f.Changed("keys") {
		o.Keys = q.Keys
	}
	if !f.Changed("duration") {
		o.Duration = q.Duration
	}
	if !f.Changed("idle-window") {
		o.IdleWindow = q.IdleWindow
	}
	return o
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", p)
		}
		out = append(out, n)
	}
	return out, nil
}
