package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// replica is one `queuebox run` process.
type replica struct {
	cmd     *exec.Cmd
	started chan struct{} // closed at the "relay started" log line
	startAt time.Time
	exited  chan struct{}
	waitErr error

	mu   sync.Mutex
	tail []string // last lines of its log, for errors
}

// relayConfig is the YAML of one relay run.
type relayConfig struct {
	DatabaseURL  string
	BatchSize    int
	Concurrency  int
	Dest         string // nats | http
	NATSURL      string
	Subject      string
	Stream       string
	HookURL      string
	AMQPURL      string
	Exchange     string
	KafkaBrokers []string
	Notify       string // channel; "" = poll
	ClaimMode    string // relay.claimMode; "" = auto (lease on the bundled table)
	MaxInflight  int    // relay.maxInflight; 0 = the relay's default
	SyncCommit   string // database.synchronousCommit; "" = the relay's default
	ClaimTurns   string // relay.claimTurns; "" = the relay's default
	// MaxProcs is GOMAXPROCS of the replica processes (not part of the
	// config file); 0 leaves Go's default, one per CPU.
	MaxProcs int
	Listen   string // server.listen with server.pprof on; "" = no management server
	// TraceEndpoint, when set, is the OTLP/HTTP endpoint the replicas
	// export a span of every row to (traceEnv; not part of the config
	// file).
	TraceEndpoint string
	// Raw, when set, is the whole file, written as it is.
	Raw string
}

// replicaConfig is the relay configuration every drain and the latency
// case start from: the database, and the relay settings the bench's flags
// vary. The caller adds the destination.
func (o Options) replicaConfig(databaseURL string) relayConfig {
	return relayConfig{DatabaseURL: databaseURL, BatchSize: o.BatchSize, Concurrency: o.Concurrency,
		ClaimMode: o.ClaimMode, ClaimTurns: o.ClaimTurns, MaxInflight: o.MaxInflight, SyncCommit: o.SyncCommit,
		MaxProcs: o.MaxProcs}
}

func (c relayConfig) yaml() string {
	if c.Raw != "" {
		return c.Raw
	}
	var b strings.Builder
	fmt.Fprintf(&b, "database:\n  type: postgresql\n  url: %q\n  outboxTable: outbox\n", c.DatabaseURL)
	if c.SyncCommit != "" {
		fmt.Fprintf(&b, "  synchronousCommit: %s\n", c.SyncCommit)
	}
	fmt.Fprintf(&b, "relay:\n  batchSize: %d\n", c.BatchSize)
	if c.ClaimMode != "" {
		fmt.Fprintf(&b, "  claimMode: %s\n", c.ClaimMode)
	}
	if c.MaxInflight > 0 {
		fmt.Fprintf(&b, "  maxInflight: %d\n", c.MaxInflight)
	}
	if c.ClaimTurns != "" {
		fmt.Fprintf(&b, "  claimTurns: %s\n", c.ClaimTurns)
	}
	if c.Notify != "" {
		fmt.Fprintf(&b, "  notify: {channel: %q, createTrigger: true}\n", c.Notify)
	}
	if c.Listen != "" {
		fmt.Fprintf(&b, "server:\n  listen: %q\n  pprof: true\n", c.Listen)
	} else {
		b.WriteString("server:\n  listen: \"\"\n")
	}
	b.WriteString("log:\n  level: info\n  format: text\n")
	switch c.Dest {
	case "nats":
		fmt.Fprintf(&b, "destinations:\n  bench:\n    type: nats\n    servers: [%q]\n    subject: %q\n    stream: %q\n", c.NATSURL, c.Subject, c.Stream)
	case "http":
		// The bare loop posts at most Concurrency requests at once; the
		// relay's HTTP destination gets the same cap. The brokers get the
		// relay's defaults.
		fmt.Fprintf(&b, "destinations:\n  bench:\n    type: http\n    url: %q\n    timeout: 30s\n", c.HookURL)
		if c.Concurrency > 0 {
			fmt.Fprintf(&b, "    concurrency: %d\n", c.Concurrency)
		}
	case "amqp":
		fmt.Fprintf(&b, "destinations:\n  bench:\n    type: amqp\n    url: %q\n    exchange: %q\n", c.AMQPURL, c.Exchange)
	case "kafka":
		fmt.Fprintf(&b, "destinations:\n  bench:\n    type: kafka\n    brokers: [%s]\n    topic: %q\n", quoteAll(c.KafkaBrokers), c.Subject)
	}
	b.WriteString("routes:\n  - topicPattern: \"**\"\n    destination: bench\n")
	return b.String()
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// replicaConfigs writes the config files of n replicas and returns one
// path per replica. Only the first replica serves the management server
// (cfg.Listen, for the CPU profile): the others would fail to bind the same
// address, so they share a second file without it.
func replicaConfigs(dir string, cfg relayConfig, n int) ([]string, error) {
	write := func(c relayConfig) (string, error) {
		path := filepath.Join(dir, "queuebox-bench-"+randomHex(4)+".yaml")
		return path, os.WriteFile(path, []byte(c.yaml()), 0o600)
	}
	first, err := write(cfg)
	if err != nil {
		return nil, err
	}
	paths := []string{first}
	if n > 1 {
		cfg.Listen = ""
		rest, err := write(cfg)
		if err != nil {
			return nil, err
		}
		for len(paths) < n {
			paths = append(paths, rest)
		}
	}
	return paths, nil
}

// replicaCommand is the `queuebox run` of one replica, with GOMAXPROCS set
// when cfg.MaxProcs is, and tracing on when cfg.TraceEndpoint is.
func replicaCommand(binary, path string, cfg relayConfig) *exec.Cmd {
	// stopReplicas ends each replica (SIGTERM, then SIGKILL) once it is
	// measured; a context would kill it mid-drain.
	cmd := exec.Command(binary, "run", "--config", path) //nolint:noctx // stopped by stopReplicas
	if cfg.TraceEndpoint != "" {
		cmd.Env = traceEnv(os.Environ(), cfg.TraceEndpoint)
	}
	if cfg.MaxProcs > 0 {
		if cmd.Env == nil {
			cmd.Env = os.Environ()
		}
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(cfg.MaxProcs))
	}
	return cmd
}

// startReplicas writes the config and starts n `queuebox run` processes.
func startReplicas(ctx context.Context, binary, dir string, cfg relayConfig, n int) ([]*replica, error) {
	paths, err := replicaConfigs(dir, cfg, n)
	if err != nil {
		return nil, err
	}
	var reps []*replica
	for _, path := range paths {
		r := &replica{started: make(chan struct{}), exited: make(chan struct{})}
		r.cmd = replicaCommand(binary, path, cfg)
		stderr, err := r.cmd.StderrPipe()
		if err != nil {
			stopReplicas(reps)
			return nil, err
		}
		if err := r.cmd.Start(); err != nil {
			stopReplicas(reps)
			return nil, fmt.Errorf("bench: start %s run: %w", binary, err)
		}
		go r.scan(stderr)
		reps = append(reps, r)
	}
	for _, r := range reps {
		select {
		case <-r.started:
		case <-r.exited:
			stopReplicas(reps)
			return nil, fmt.Errorf("bench: relay exited at start (%v): %s", r.waitErr, r.lastLines())
		case <-time.After(30 * time.Second):
			stopReplicas(reps)
			return nil, fmt.Errorf("bench: relay did not start within 30s: %s", r.lastLines())
		case <-ctx.Done():
			stopReplicas(reps)
			return nil, ctx.Err()
		}
	}
	return reps, nil
}

func (r *replica) scan(stderr interface{ Read([]byte) (int, error) }) {
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	once := sync.Once{}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.Contains(line, "relay started"):
			once.Do(func() { r.startAt = time.Now(); close(r.started) })
		}
		r.mu.Lock()
		r.tail = append(r.tail, line)
		if len(r.tail) > 20 {
			r.tail = r.tail[len(r.tail)-20:]
		}
		r.mu.Unlock()
	}
	r.waitErr = r.cmd.Wait()
	close(r.exited)
}

func (r *replica) lastLines() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.tail, "\n")
}

// warnings returns the log lines of level WARN or ERROR kept in the tail.
func (r *replica) problems() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, l := range r.tail {
		if strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") {
			out = append(out, l)
		}
	}
	return out
}

// stopReplicas sends SIGTERM and waits for each process (SIGKILL after 15s).
func stopReplicas(reps []*replica) {
	for _, r := range reps {
		if r.cmd.Process != nil {
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, r := range reps {
		select {
		case <-r.exited:
		case <-time.After(15 * time.Second):
			_ = r.cmd.Process.Kill()
			<-r.exited
		}
	}
}

// procStat is what /proc tells about a process.
type procStat struct {
	cpu     time.Duration // user + system
	minflt  uint64        // minor page faults
	hwmKiB  int64         // VmHWM: peak resident set
	rssKiB  int64
	present bool
}

var clockTicks = 100.0 // USER_HZ; 100 on every Linux this runs on

func readProc(pid int) procStat {
	var st procStat
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st
	}
	// Fields after the command name (which may hold spaces) in parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return st
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 13 {
		return st
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	stt, _ := strconv.ParseFloat(f[12], 64)
	st.cpu = time.Duration((ut + stt) / clockTicks * float64(time.Second))
	st.minflt, _ = strconv.ParseUint(f[7], 10, 64)
	st.present = true
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st
	}
	for _, line := range strings.Split(string(s), "\n") {
		switch {
		case strings.HasPrefix(line, "VmHWM:"):
			st.hwmKiB = kib(line)
		case strings.HasPrefix(line, "VmRSS:"):
			st.rssKiB = kib(line)
		}
	}
	return st
}

// databaseUsage is the CPU time and the minor page faults of every process
// named postgres on this machine (server, backends, background workers):
// what a drain cost the database, when it is local. Processes that exited
// between two readings (autovacuum workers) are missed; zero when no
// PostgreSQL runs here.
func databaseUsage() (total time.Duration, faults uint64) {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		comm, err := os.ReadFile(d + "/comm")
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		st := readProc(pid)
		total += st.cpu
		faults += st.minflt
	}
	return total, faults
}

func kib(line string) int64 {
	f := strings.Fields(line)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.ParseInt(f[1], 10, 64)
	return n
}

func procAll(reps []*replica) []procStat {
	out := make([]procStat, len(reps))
	for i, r := range reps {
		out[i] = readProc(r.cmd.Process.Pid)
	}
	return out
}

var errNoBinary = errors.New("bench: no queuebox binary to run replicas (Options.Binary)")
