// Package bench is `queuebox bench`: it measures the relay against the bare
// claim–publish–complete loop on the same machine, in the same invocation,
// and reports relay ÷ bare for every case (the tracked figure; absolute
// numbers vary between runs on shared machines), commit-to-ack latency at a
// fixed offered load with and without wake-on-commit, CPU per 10,000 rows,
// peak RSS and the idle cost of a replica. See docs/benchmarks.md.
package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Options configure a run. Zero values take the defaults of Defaults.
type Options struct {
	DatabaseURL string // server URL; the bench uses database Database on it
	Database    string // created when missing (default queuebox_bench)
	NATSURL     string // "" = an embedded nats-server on a random port
	AMQPURL     string // RabbitMQ of the amqp cases (DefaultAMQPURL)
	// KafkaBrokers (host:port, comma-separated) of the kafka cases; "" =
	// no Kafka cases.
	KafkaBrokers string
	Binary       string // the queuebox binary started for relay replicas

	Rows        int    // rows per drain (100,000)
	Keys        int    // keys of the keyed variant (1,000)
	PayloadSize int    // bytes (200)
	BatchSize   int    // relay.batchSize and the bare loop's batch (100, the relay's default)
	Concurrency int    // HTTP requests in flight, relay and bare (16)
	ClaimMode   string // relay.claimMode of the relay replicas: lease (default), lock or buckets
	MaxInflight int    // relay.maxInflight of the replicas; 0 = the relay's default
	SyncCommit  string // database.synchronousCommit of the relay replicas; "" = the relay's default (off)
	ClaimTurns  string // relay.claimTurns of the relay replicas; "" = the relay's default (table)
	MaxProcs    int    // GOMAXPROCS of the relay replica processes; 0 = Go's default (one per CPU)
	Replicas    []int  // relay processes per drain ({1, 3})
	Runs        int    // rounds per case; the report keeps the medians (1)
	Cases       []string

	Rate       int           // offered load of the latency case, rows/s (2,000)
	Duration   time.Duration // of the latency case (10s)
	IdleWindow time.Duration // idle cost measurement (10s, after 11s to settle), first round only
	Timeout    time.Duration // per drain (5m)

	// ProfileDir, when set, receives a CPU profile of the first replica of
	// every drain (<case>-x<replicas>.pprof), taken through its
	// server.pprof endpoint for about as long as the bare loop took.
	ProfileDir string

	// Trace has every relay replica of the drain and latency cases trace
	// every row (OTEL_TRACES_EXPORTER=otlp, the always_on sampler) and
	// export the spans over OTLP/HTTP to a receiver in the bench that
	// counts and discards them (spans.go). A drain fails when fewer spans
	// than rows arrive.
	Trace bool

	Progress io.Writer // progress lines; nil = none
}

// Defaults returns the default options (the full run of `make bench`).
func Defaults() Options {
	return Options{
		DatabaseURL: "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
		AMQPURL:     DefaultAMQPURL,
		Database:    "queuebox_bench",
		Rows:        100_000,
		Keys:        1_000,
		PayloadSize: 200,
		BatchSize:   100,
		Concurrency: 16,
		Replicas:    []int{1, 3},
		Runs:        1,
		Rate:        2_000,
		Duration:    10 * time.Second,
		IdleWindow:  10 * time.Second,
		Timeout:     5 * time.Minute,
	}
}

// Quick shrinks o to a smoke run.
func Quick(o Options) Options {
	o.Rows = 5_000
	o.Keys = 100
	o.Duration = 3 * time.Second
	o.IdleWindow = 3 * time.Second
	return o
}

// AllCases are the case names --cases filters on.
var AllCases = []string{"nats-keyed", "nats-unkeyed", "http-keyed", "http-unkeyed", "amqp-keyed", "amqp-unkeyed", "kafka-keyed", "kafka-unkeyed", "latency", "webhook", "skewed"}

// destinations are the destination prefixes of the drain cases.
var destinations = []string{"nats", "http", "amqp", "kafka"}

func (o *Options) want(name string) bool {
	if len(o.Cases) == 0 {
		return true
	}
	for _, c := range o.Cases {
		if c == name || strings.HasPrefix(name, c+"-") {
			return true
		}
	}
	return false
}

// Report is the outcome of a run; it is what --output json prints.
type Report struct {
	Machine   Machine     `json:"machine"`
	Rows      int         `json:"rows"`
	Keys      int         `json:"keys"`
	BatchSize int         `json:"batchSize"`
	Runs      int         `json:"runs"`
	Payload   int         `json:"payloadBytes"`
	Traced    bool        `json:"traced"` // Options.Trace
	Drains    []Drain     `json:"drains"`
	Latency   []Latency   `json:"latency"`
	Isolation []Isolation `json:"isolation"`
	Started   time.Time   `json:"started"`
	Elapsed   string      `json:"elapsed"`
}

// Machine describes where the figures come from.
type Machine struct {
	CPUs       int    `json:"cpus"`
	CPU        string `json:"cpu"`
	GOOS       string `json:"goos"`
	Go         string `json:"go"`
	PostgreSQL string `json:"postgresql"`
	NATS       string `json:"nats"`
	// Kernel is what makes a CPU second dearer here (kernel.go):
	// page-table isolation, a missing pcid flag, the huge pages reserved.
	Kernel string `json:"kernel,omitempty"`
}

// Drain is one case: a destination, keyed or not, the bare loop and the
// relay at each replica count.
type Drain struct {
	Case   string  `json:"case"`
	Dest   string  `json:"destination"`
	Keyed  bool    `json:"keyed"`
	Rows   int     `json:"rows"`
	Runs   int     `json:"runs"` // rounds; the figures are their medians
	Bare   float64 `json:"bareRowsPerSec"`
	BareDB float64 `json:"bareDatabaseCpuSecondsPer10kRows,omitempty"`
	// BareSteal is the CPU steal (% of the machine's CPU time taken by
	// the hypervisor) during the median bare loop; 0 on bare metal.
	BareSteal float64 `json:"bareStealPercent"`
	// BareHostCPU and BareBusy are the CPU time of every process on the
	// machine (s per 10,000 rows) and the share of the machine's CPU time
	// spent running, during the median bare loop.
	BareHostCPU float64    `json:"bareHostCpuSecondsPer10kRows"`
	BareBusy    float64    `json:"bareHostBusyPercent"`
	Relay       []RelayRun `json:"relay"`
	BareErr     string     `json:"bareError,omitempty"`
	Warnings    []string   `json:"warnings,omitempty"`

	// BareSwitches is the machine's context switches per row during the
	// median bare loop (RelayRun.SwitchesPerRow).
	BareSwitches float64 `json:"bareContextSwitchesPerRow"`
	// BarePageFaults and BareDBPageFaults are the machine's and the
	// database's page faults per row during the median bare loop
	// (RelayRun.PageFaultsPerRow).
	BarePageFaults   float64 `json:"barePageFaultsPerRow"`
	BareDBPageFaults float64 `json:"bareDatabasePageFaultsPerRow"`
}

// RelayRun is the relay with Replicas processes on one case.
type RelayRun struct {
	Replicas      int     `json:"replicas"`
	RowsPerSec    float64 `json:"rowsPerSec"`
	Ratio         float64 `json:"ratio"` // RowsPerSec ÷ bare of the same round
	RatioMin      float64 `json:"ratioMin,omitempty"`
	RatioMax      float64 `json:"ratioMax,omitempty"`
	CPUPer10k     float64 `json:"cpuSecondsPer10kRows"`
	DBCPUPer10k   float64 `json:"databaseCpuSecondsPer10kRows,omitempty"` // local PostgreSQL only
	StealPct      float64 `json:"stealPercent"`                           // CPU steal during the drain (Drain.BareSteal)
	HostCPUPer10k float64 `json:"hostCpuSecondsPer10kRows"`               // every process on the machine (Drain.BareHostCPU)
	HostBusyPct   float64 `json:"hostBusyPercent"`                        // share of the machine's CPU time spent running
	PeakRSSMiB    float64 `json:"peakRssMiB"`                             // the largest replica's VmHWM
	IdleQPS       float64 `json:"idleQueriesPerSecPerReplica"`
	IdleCPU       float64 `json:"idleCpuPercentPerReplica"`
	Duplicates    int     `json:"duplicates"`
	Error         string  `json:"error,omitempty"`
	DrainSeconds  float64 `json:"drainSeconds"`
	StartupMillis float64 `json:"startupMillis"`
	// RowsPerClaim is rows ÷ the claims that delivered them (the distinct
	// claim tokens left on the sent rows; claims that found nothing are not
	// counted). Below the batch size, claims came back with part of a batch.
	// Lease mode only: lock mode writes no claim token.
	RowsPerClaim float64 `json:"rowsPerClaim,omitempty"`
	// Spans is how many spans the replicas exported during the drain
	// (Options.Trace), counted once they had stopped and flushed them.
	Spans int64 `json:"spans,omitempty"`
	// SwitchesPerRow is the machine's context switches (every process's)
	// per row during the drain: the sleeps and wake-ups of the relay, the
	// database and the broker, which a kernel with page-table isolation
	// makes dear (docs/benchmarks.md, "Machine").
	SwitchesPerRow float64 `json:"contextSwitchesPerRow"`
	// PageFaultsPerRow is the machine's page faults per row during the
	// drain, DBPageFaultsPerRow the database's processes' (minor faults):
	// each new backend faults in every page of the shared buffers it
	// touches.
	PageFaultsPerRow   float64 `json:"pageFaultsPerRow"`
	DBPageFaultsPerRow float64 `json:"databasePageFaultsPerRow"`
}

// Latency is commit-to-ack at a fixed offered load.
type Latency struct {
	Wake      bool    `json:"wakeOnCommit"`
	Offered   int     `json:"offeredRowsPerSec"`
	Achieved  float64 `json:"achievedRowsPerSec"`
	Rows      int     `json:"rows"`
	P50       float64 `json:"p50ms"`
	P95       float64 `json:"p95ms"`
	P99       float64 `json:"p99ms"`
	Max       float64 `json:"maxms"`
	IdleQPS   float64 `json:"idleQueriesPerSec"`
	IdleCPU   float64 `json:"idleCpuPercent"`
	Error     string  `json:"error,omitempty"`
	Delivered int     `json:"delivered"`
	// Notifications is how many notifications a listener of the bench's
	// own heard on the relay's channel while the rows were written and
	// delivered: the commits that notified (producers notify only while
	// the relay sleeps). Wake on commit only.
	Notifications int `json:"notifications,omitempty"`
}

func (o *Options) say(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

func (o *Options) fill() {
	d := Defaults()
	if o.DatabaseURL == "" {
		o.DatabaseURL = d.DatabaseURL
	}
	if o.Database == "" {
		o.Database = d.Database
	}
	if o.AMQPURL == "" {
		o.AMQPURL = d.AMQPURL
	}
	if o.Rows <= 0 {
		o.Rows = d.Rows
	}
	if o.Keys <= 0 {
		o.Keys = d.Keys
	}
	if o.PayloadSize <= 0 {
		o.PayloadSize = d.PayloadSize
	}
	if o.BatchSize <= 0 {
		o.BatchSize = d.BatchSize
	}
	if o.Concurrency <= 0 {
		o.Concurrency = d.Concurrency
	}
	if len(o.Replicas) == 0 {
		o.Replicas = d.Replicas
	}
	if o.Runs <= 0 {
		o.Runs = 1
	}
	if o.Rate <= 0 {
		o.Rate = d.Rate
	}
	if o.Duration <= 0 {
		o.Duration = d.Duration
	}
	if o.IdleWindow <= 0 {
		o.IdleWindow = d.IdleWindow
	}
	if o.Timeout <= 0 {
		o.Timeout = d.Timeout
	}
}

// Run runs every selected case and returns the report. A case that fails
// is recorded in the report (Error) and the run goes on; Run fails only
// when the services cannot be reached.
func Run(ctx context.Context, o Options) (*Report, error) {
	o.fill()
	if o.Binary == "" {
		return nil, errNoBinary
	}
	for _, c := range o.Cases {
		if !slices.Contains(AllCases, c) && !slices.Contains(destinations, c) {
			return nil, fmt.Errorf("bench: unknown case %q (want one of %s, %s)", c, strings.Join(AllCases, ", "), strings.Join(destinations, ", "))
		}
	}
	w, err := openWorld(ctx, &o)
	if err != nil {
		return nil, err
	}
	defer w.close()
	rep := &Report{Rows: o.Rows, Keys: o.Keys, BatchSize: o.BatchSize, Runs: o.Runs, Payload: o.PayloadSize, Traced: o.Trace, Started: time.Now()}
	rep.Machine = machine(ctx, w)
	tmp, err := os.MkdirTemp("", "queuebox-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	for _, dest := range destinations {
		if err := w.unavailable(dest); err != nil {
			// Skipped when they came with "all cases"; failed when asked for.
			for _, name := range []string{dest + "-keyed", dest + "-unkeyed"} {
				switch {
				case !o.want(name):
				case len(o.Cases) == 0:
					o.say("== %s skipped: %v", name, err)
				default:
					rep.Drains = append(rep.Drains, Drain{Case: name, Dest: dest, Keyed: name == dest+"-keyed", Rows: o.Rows, BareErr: err.Error()})
				}
			}
			continue
		}
		for _, keyed := range []bool{true, false} {
			name := dest + "-" + map[bool]string{true: "keyed", false: "unkeyed"}[keyed]
			if !o.want(name) {
				continue
			}
			d := runDrain(ctx, w, &o, tmp, name, dest, keyed)
			rep.Drains = append(rep.Drains, d)
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
		}
	}
	if o.want("latency") {
		for _, wake := range []bool{false, true} {
			o.say("== latency: %d rows/s for %s, wake on commit %v", o.Rate, o.Duration, wake)
			l := runLatency(ctx, w, &o, tmp, wake)
			if l.Error != "" {
				o.say("   failed: %s", l.Error)
			} else {
				o.say("   p50 %.1f ms  p95 %.1f ms  p99 %.1f ms  max %.1f ms (%d rows)", l.P50, l.P95, l.P99, l.Max, l.Rows)
			}
			rep.Latency = append(rep.Latency, l)
		}
	}
	for _, c := range []struct {
		name string
		run  func(context.Context, *world, *Options, string) Isolation
	}{{"webhook", runWebhook}, {"skewed", runSkewed}} {
		if !o.want(c.name) {
			continue
		}
		is := c.run(ctx, w, &o, tmp)
		switch {
		case is.Error != "":
			o.say("== %s failed: %s", c.name, is.Error)
		case is.Baseline > 0:
			o.say("== %s: %d rows, %d keys, 1 key in %d at %.0f ms: the others %.0f rows/s, %.0f without the slow keys (%.2f)",
				c.name, is.Rows, is.Keys, skewShare, is.Latency, is.RowsPerSec, is.Baseline, is.Ratio)
		default:
			o.say("== %s: %d rows, %d keys, receiver at %.0f ms: %.0f rows/s (target %.0f)", c.name, is.Rows, is.Keys, is.Latency, is.RowsPerSec, is.Target)
		}
		rep.Isolation = append(rep.Isolation, is)
	}
	rep.Elapsed = time.Since(rep.Started).Round(time.Second).String()
	return rep, nil
}

func machine(ctx context.Context, w *world) Machine {
	m := Machine{CPUs: runtime.NumCPU(), GOOS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		m.CPU, _ = cpuInfo(f, "model name")
		f.Close()
	}
	_ = w.admin.QueryRow(ctx, "SHOW server_version").Scan(&m.PostgreSQL)
	// A drain is too short to see an autovacuum, a sustained load is not
	// (docs/operations.md, "Vacuum"): the figures say which server they
	// come from.
	var autovacuum string
	if err := w.admin.QueryRow(ctx, "SHOW autovacuum").Scan(&autovacuum); err == nil && autovacuum != "on" {
		m.PostgreSQL += ", autovacuum " + autovacuum
	}
	// With huge_pages = try (the default) PostgreSQL takes huge pages for its
	// shared memory only when the kernel has them reserved at its start
	// (Machine.Kernel); that moves the relay's ratio.
	var huge string
	if err := w.admin.QueryRow(ctx, "SHOW huge_pages").Scan(&huge); err == nil {
		m.PostgreSQL += ", huge_pages " + huge
		// PostgreSQL 15 and later say how many its shared memory needs.
		var need string
		if err := w.admin.QueryRow(ctx, "SHOW shared_memory_size_in_huge_pages").Scan(&need); err == nil && need != "-1" {
			m.PostgreSQL += " (needs " + need + ")"
		}
	}
	m.Kernel = kernelFacts()
	m.NATS = w.nc.ConnectedServerVersion()
	if w.ns != nil {
		m.NATS += " (embedded)"
	}
	return m
}

// topicFor returns a fresh topic (= NATS subject) for one run.
func topicFor() string { return "qbb." + randomHex(6) }

// bareRun is one run of the bare loop.
type bareRun struct {
	rowsPerSec, dbPer10k, steal float64
	hostPer10k, busy            float64
	switches                    float64 // per row
	faults, dbFaults            float64 // per row
}

func runBare(ctx context.Context, w *world, o *Options, dest string, keyed bool) (bareRun, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	s, err := w.newSchema(ctx)
	if err != nil {
		return bareRun{}, err
	}
	defer s.close()
	topic := topicFor()
	if err := s.insert(ctx, topic, o.Rows, keysOf(o, keyed), o.PayloadSize); err != nil {
		return bareRun{}, err
	}
	var publish publishFunc
	switch dest {
	case "nats":
		st, err := w.stream(ctx, topic)
		if err != nil {
			return bareRun{}, err
		}
		defer func() { _ = w.js.DeleteStream(context.WithoutCancel(ctx), st.CachedInfo().Config.Name) }()
		publish = barePublishNATS(w.js, topic)
	case "http":
		r := newReceipts(o.Rows)
		w.hook.set(r)
		defer w.hook.set(nil)
		publish = barePublishHTTP(httpClient(o.Concurrency), w.hookURL+"/hooks/"+topic, o.Concurrency)
	case "amqp":
		r := newReceipts(o.Rows)
		sink, err := w.amqp.sink(ctx, topic, r)
		if err != nil {
			return bareRun{}, err
		}
		defer sink.close()
		ch, err := w.amqp.confirmChannel()
		if err != nil {
			return bareRun{}, err
		}
		defer ch.Close()
		publish = barePublishAMQP(ch, topic)
	case "kafka":
		sink, err := w.kafka.sink(ctx, topic, newReceipts(o.Rows))
		if err != nil {
			return bareRun{}, err
		}
		defer sink.close()
		kw := w.kafka.writer(topic, o.BatchSize)
		defer kw.Close()
		publish = barePublishKafka(kw)
	}
	start, meter := time.Now(), startHostMeter()
	n, err := bareLoop(ctx, s, keyed, o.BatchSize, publish)
	elapsed := time.Since(start)
	c := meter.stop()
	if err != nil {
		return bareRun{}, err
	}
	if n != o.Rows {
		return bareRun{}, fmt.Errorf("bare loop sent %d of %d rows", n, o.Rows)
	}
	return bareRun{rowsPerSec: float64(n) / elapsed.Seconds(), dbPer10k: c.db.Seconds() / float64(n) * 10_000,
		steal: c.steal, hostPer10k: c.host.Seconds() / float64(n) * 10_000, busy: c.busy,
		switches: float64(c.switches) / float64(n), faults: float64(c.faults) / float64(n),
		dbFaults: float64(c.dbFaults) / float64(n)}, nil
}

// runDrain runs one case o.Runs times — the bare loop, then the relay at
// each replica count, each ratio against the bare loop of its own round —
// and keeps the median: of the bare rates, and for each replica count the
// round with the median ratio, with the lowest and highest ratio beside it.
func runDrain(ctx context.Context, w *world, o *Options, tmp, name, dest string, keyed bool) Drain {
	d := Drain{Case: name, Dest: dest, Keyed: keyed, Rows: o.Rows, Runs: o.Runs}
	var bares []bareRun
	runs := make([][]RelayRun, len(o.Replicas))
	for round := 1; round <= o.Runs && ctx.Err() == nil; round++ {
		if o.Runs > 1 {
			o.say("== %s: %d rows, batch %d, round %d of %d", name, o.Rows, o.BatchSize, round, o.Runs)
		} else {
			o.say("== %s: %d rows, batch %d", name, o.Rows, o.BatchSize)
		}
		br, err := runBare(ctx, w, o, dest, keyed)
		if err != nil {
			d.BareErr = err.Error()
			o.say("   bare loop failed: %v", err)
			continue
		}
		bare := br.rowsPerSec
		bares = append(bares, br)
		o.say("   bare loop      %8.0f rows/s  db cpu %.2fs/10k  host cpu %.2fs/10k  busy %.0f%%  steal %.0f%%  cs %.1f/row  pf %.2f/row (db %.2f)", bare, br.dbPer10k, br.hostPer10k, br.busy, br.steal, br.switches, br.faults, br.dbFaults)
		for i, n := range o.Replicas {
			rr := runRelay(ctx, w, o, tmp, dest, keyed, n, profileSpec{
				path: profilePath(o.ProfileDir, name, n), seconds: profileSeconds(o.Rows, bare)}, round == 1)
			rr.Ratio = rr.RowsPerSec / bare
			if rr.Error != "" {
				o.say("   relay ×%d failed: %s", n, rr.Error)
			} else {
				perClaim := ""
				if rr.RowsPerClaim > 0 {
					perClaim = fmt.Sprintf("  %.1f rows/claim", rr.RowsPerClaim)
				}
				if o.Trace {
					perClaim += fmt.Sprintf("  %d spans", rr.Spans)
				}
				o.say("   relay ×%d       %8.0f rows/s  ratio %.2f  cpu %.2fs/10k  db cpu %.2fs/10k  host cpu %.2fs/10k  busy %.0f%%  steal %.0f%%  cs %.1f/row  pf %.2f/row (db %.2f)  rss %.0f MiB%s  idle %.1f q/s %.1f%% cpu",
					n, rr.RowsPerSec, rr.Ratio, rr.CPUPer10k, rr.DBCPUPer10k, rr.HostCPUPer10k, rr.HostBusyPct, rr.StealPct, rr.SwitchesPerRow, rr.PageFaultsPerRow, rr.DBPageFaultsPerRow, rr.PeakRSSMiB, perClaim, rr.IdleQPS, rr.IdleCPU)
				if steal := max(rr.StealPct, br.steal); steal > stealWarnPercent {
					d.Warnings = append(d.Warnings, fmt.Sprintf("round %d, relay ×%d: CPU steal %.0f%% (bare loop %.0f%%): the hypervisor took that share of the CPUs; read this ratio with care",
						round, n, rr.StealPct, br.steal))
				}
			}
			runs[i] = append(runs[i], rr)
		}
	}
	if len(bares) > 0 {
		m := slices.SortedFunc(slices.Values(bares), func(a, b bareRun) int { return cmp.Compare(a.rowsPerSec, b.rowsPerSec) })[len(bares)/2]
		d.Bare, d.BareDB, d.BareSteal = m.rowsPerSec, median(dbPer10k(bares)), m.steal
		d.BareHostCPU, d.BareBusy, d.BareSwitches = m.hostPer10k, m.busy, m.switches
		d.BarePageFaults, d.BareDBPageFaults = m.faults, m.dbFaults
	}
	for i, n := range o.Replicas {
		m := medianRun(runs[i], n)
		if len(runs[i]) > 0 && m.Error == "" { // the idle cost is measured in the first round
			m.IdleQPS, m.IdleCPU = runs[i][0].IdleQPS, runs[i][0].IdleCPU
		}
		d.Relay = append(d.Relay, m)
	}
	return d
}

// medianRun returns the run with the median ratio (the first failure when
// any round failed), with RatioMin and RatioMax over the rounds.
func medianRun(runs []RelayRun, replicas int) RelayRun {
	if len(runs) == 0 {
		return RelayRun{Replicas: replicas, Error: "not run"}
	}
	for _, r := range runs {
		if r.Error != "" {
			return r
		}
	}
	sorted := slices.Clone(runs)
	slices.SortFunc(sorted, func(a, b RelayRun) int { return cmp.Compare(a.Ratio, b.Ratio) })
	m := sorted[len(sorted)/2]
	m.RatioMin, m.RatioMax = sorted[0].Ratio, sorted[len(sorted)-1].Ratio
	return m
}

func dbPer10k(runs []bareRun) []float64 {
	out := make([]float64, len(runs))
	for i, r := range runs {
		out[i] = r.dbPer10k
	}
	return out
}

// median returns the middle value of xs (the upper one of the two middle
// values when len(xs) is even).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func keysOf(o *Options, keyed bool) int {
	if keyed {
		return o.Keys
	}
	return 0
}

// runRelay drains o.Rows rows to dest with replicas relay processes and
// measures the drain: its rate, the relay's and the machine's CPU, and,
// with idle, what the replicas cost once the table is empty.
func runRelay(ctx context.Context, w *world, o *Options, tmp, dest string, keyed bool, replicas int, prof profileSpec, idle bool) (rr RelayRun) {
	rr.Replicas = replicas
	fail := func(err error) RelayRun { rr.Error = err.Error(); return rr }
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	s, err := w.newSchema(ctx)
	if err != nil {
		return fail(err)
	}
	defer s.close()
	topic := topicFor()
	if err := s.insert(ctx, topic, o.Rows, keysOf(o, keyed), o.PayloadSize); err != nil {
		return fail(err)
	}
	cfg := o.replicaConfig(s.url)
	cfg.TraceEndpoint = w.traceURL()
	cfg.Dest, cfg.NATSURL, cfg.Subject, cfg.HookURL = dest, w.natsURL, topic, w.hookURL+"/hooks/{{ topic }}"
	if prof.path != "" {
		if cfg.Listen, err = freeAddr(ctx); err != nil {
			return fail(err)
		}
	}
	sink, err := openRelaySink(ctx, w, o, dest, topic, &cfg)
	if err != nil {
		return fail(err)
	}
	defer sink.close()
	defer func() {
		if sink.recv != nil {
			rr.Duplicates = sink.recv.dupes
		}
	}()

	if w.spans != nil {
		// Run after stopReplicas (deferred below, so run before this):
		// the replicas flush their spans when they stop.
		base, _ := w.spans.count()
		defer func() {
			n, err := w.spans.count()
			rr.Spans = n - base
			if err == nil {
				err = checkSpans(rr.Spans, o.Rows)
			}
			if err != nil && rr.Error == "" {
				rr.Error = "tracing: " + err.Error()
			}
		}()
	}
	spawn := time.Now()
	reps, err := startReplicas(ctx, o.Binary, tmp, cfg, replicas)
	if err != nil {
		return fail(err)
	}
	defer stopReplicas(reps)
	start := firstStart(reps)
	rr.StartupMillis = float64(start.Sub(spawn).Microseconds()) / 1000
	before, meter := procAll(reps), startHostMeter()
	profiled := make(chan error, 1)
	if prof.path != "" {
		go func() { profiled <- fetchProfile(ctx, cfg.Listen, prof) }()
	} else {
		profiled <- nil
	}
	doneAt, err := sink.wait()
	if err != nil {
		return fail(withRelayLog(err, reps))
	}
	after := procAll(reps)
	rr.recordDrain(o.Rows, doneAt.Sub(start), meter.stop(), before, after)
	if err := <-profiled; err != nil {
		o.say("   cpu profile not written: %v", err)
	}

	// All rows are acked; wait until they are marked sent, then measure
	// what the idle replicas cost.
	if err := waitSettled(ctx, s); err != nil {
		return fail(err)
	}
	// Lock mode leaves no token (claims is 0); a failed count only loses
	// this figure, not the run.
	if claims, err := s.claims(ctx); err != nil {
		o.say("   rows per claim not counted: %v", err)
	} else if claims > 0 {
		rr.RowsPerClaim = float64(o.Rows) / float64(claims)
	}
	if !idle {
		return rr
	}
	rr.IdleQPS, rr.IdleCPU, err = idleCost(ctx, w, o, reps)
	if err != nil {
		return fail(err)
	}
	return rr
}

// relaySink is where a relay run's rows arrive: wait returns when the last
// one has, recv counts them where the bench receives them itself (nil for
// NATS, where the stream counts), and close takes the sink down.
type relaySink struct {
	wait  func() (time.Time, error)
	recv  *receipts
	close func()
}

// openRelaySink sets up the receiving end of dest for topic and points cfg
// at it.
func openRelaySink(ctx context.Context, w *world, o *Options, dest, topic string, cfg *relayConfig) (*relaySink, error) {
	switch dest {
	case "nats":
		st, err := w.stream(ctx, topic)
		if err != nil {
			return nil, err
		}
		cfg.Stream = st.CachedInfo().Config.Name
		return &relaySink{
			wait:  func() (time.Time, error) { return waitStream(ctx, st, o.Rows) },
			close: func() { _ = w.js.DeleteStream(context.WithoutCancel(ctx), cfg.Stream) },
		}, nil
	case "http":
		r := newReceipts(o.Rows)
		w.hook.set(r)
		return &relaySink{
			wait:  func() (time.Time, error) { return r.wait(ctx, "HTTP receiver") },
			recv:  r,
			close: func() { w.hook.set(nil) },
		}, nil
	case "amqp":
		r := newReceipts(o.Rows)
		sink, err := w.amqp.sink(ctx, topic, r)
		if err != nil {
			return nil, err
		}
		cfg.AMQPURL, cfg.Exchange = w.amqp.url, topic
		return &relaySink{
			wait:  func() (time.Time, error) { return r.wait(ctx, "RabbitMQ queue") },
			recv:  r,
			close: sink.close,
		}, nil
	case "kafka":
		r := newReceipts(o.Rows)
		sink, err := w.kafka.sink(ctx, topic, r)
		if err != nil {
			return nil, err
		}
		cfg.KafkaBrokers = w.kafka.brokers
		return &relaySink{
			wait:  func() (time.Time, error) { return r.wait(ctx, "Kafka topic") },
			recv:  r,
			close: sink.close,
		}, nil
	}
	return nil, fmt.Errorf("bench: no destination %q", dest)
}

// firstStart is when the first of the replicas reported it had started.
func firstStart(reps []*replica) time.Time {
	start := reps[0].startAt
	for _, r := range reps[1:] {
		if r.startAt.Before(start) {
			start = r.startAt
		}
	}
	return start
}

// withRelayLog adds to err the problems the first replica that logged any
// reported.
func withRelayLog(err error, reps []*replica) error {
	for _, r := range reps {
		if p := r.problems(); len(p) > 0 {
			return fmt.Errorf("%w; relay log: %s", err, strings.Join(p, " | "))
		}
	}
	return err
}

// recordDrain fills in the figures of a drain of rows rows that took
// drain: the machine's cost c, and the replicas' CPU and peak memory
// between before and after.
func (rr *RelayRun) recordDrain(rows int, drain time.Duration, c hostCost, before, after []procStat) {
	n := float64(rows)
	rr.StealPct, rr.HostBusyPct = c.steal, c.busy
	rr.SwitchesPerRow = float64(c.switches) / n
	rr.PageFaultsPerRow = float64(c.faults) / n
	rr.DBPageFaultsPerRow = float64(c.dbFaults) / n
	rr.DBCPUPer10k = c.db.Seconds() / n * 10_000
	rr.HostCPUPer10k = c.host.Seconds() / n * 10_000
	rr.DrainSeconds = drain.Seconds()
	rr.RowsPerSec = n / rr.DrainSeconds
	var cpu time.Duration
	for i := range after {
		cpu += after[i].cpu - before[i].cpu
		rr.PeakRSSMiB = max(rr.PeakRSSMiB, float64(after[i].hwmKiB)/1024)
	}
	rr.CPUPer10k = cpu.Seconds() / n * 10_000
}

// waitSettled waits until no row is pending or processing.
func waitSettled(ctx context.Context, s *schema) error {
	for {
		n, err := s.unfinished(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d rows still pending or processing: %w", n, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// idleCost lets the replicas settle into idle polling, then measures the
// bench database's transactions (every relay statement is one; committed
// or rolled back)
// and the replicas' CPU over o.IdleWindow. Nothing else uses the bench
// database meanwhile. Returns per-replica queries/s and CPU percent.
// statsLag is how long PostgreSQL 15 may hold a backend's counts before
// pg_stat_database shows them (PGSTAT_IDLE_INTERVAL, 10 s), plus a second.
const statsLag = 11 * time.Second

func idleCost(ctx context.Context, w *world, o *Options, reps []*replica) (qps, cpuPct float64, err error) {
	// PostgreSQL 15 backends report their counts when they go idle, and an
	// idle backend holds them up to 10 s: a pool connection that went quiet
	// after the drain would otherwise add thousands of the drain's commits
	// to the idle window. Settling 11 s also lets the polling back off.
	if !sleepCtx(ctx, statsLag) {
		return 0, 0, ctx.Err()
	}
	x0, err := w.transactions(ctx)
	if err != nil {
		return 0, 0, err
	}
	p0 := procAll(reps)
	t0 := time.Now()
	if !sleepCtx(ctx, o.IdleWindow) {
		return 0, 0, ctx.Err()
	}
	// pg_stat_database is flushed by each backend at most once a second:
	// give the last second's counts time to land, in the numerator only.
	p1 := procAll(reps)
	el := time.Since(t0).Seconds()
	if !sleepCtx(ctx, 1100*time.Millisecond) {
		return 0, 0, ctx.Err()
	}
	x1, err := w.transactions(ctx)
	if err != nil {
		return 0, 0, err
	}
	var cpu time.Duration
	for i := range reps {
		cpu += p1[i].cpu - p0[i].cpu
	}
	n := float64(len(reps))
	// The transactions query runs on the maintenance database, not the
	// bench one: nothing to subtract. Each read may lag by up to a second
	// of counts; over the reads' own interval the lags cancel out.
	return float64(x1-x0) / (el + 1.1) / n, cpu.Seconds() / el / n * 100, nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// ErrIncomplete marks a report with failed cases.
var ErrIncomplete = errors.New("bench: some cases failed")

// Failed reports whether any case of r failed.
func (r *Report) Failed() bool {
	for _, d := range r.Drains {
		if d.BareErr != "" {
			return true
		}
		for _, rr := range d.Relay {
			if rr.Error != "" {
				return true
			}
		}
	}
	for _, l := range r.Latency {
		if l.Error != "" {
			return true
		}
	}
	for _, is := range r.Isolation {
		if is.Error != "" {
			return true
		}
	}
	return false
}
