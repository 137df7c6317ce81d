package faults

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PrivatePostgres is a PostgreSQL instance of one test: initdb into a
// temporary directory, started with pg_ctl on a free port. Restarting or
// stopping it harms no other test (the machine's shared PostgreSQL is
// never touched).
type PrivatePostgres struct {
	t       testing.TB
	bin     string // directory of initdb and pg_ctl
	dataDir string
	port    int
	runAs   string // "postgres" when running as root (initdb refuses root)
	// URL connects to the instance as the superuser postgres.
	URL string
}

// StartPrivatePostgres creates and starts a private instance, stopped and
// removed when t ends. It skips t when no PostgreSQL server binaries are
// installed (or fails it under QUEUEBOX_REQUIRE_SERVICES=1).
func StartPrivatePostgres(t testing.TB) *PrivatePostgres {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(bins) == 0 {
		if os.Getenv("QUEUEBOX_REQUIRE_SERVICES") == "1" {
			t.Fatal("private PostgreSQL: no /usr/lib/postgresql/*/bin/pg_ctl")
		}
		t.Skip("skipping: no PostgreSQL server binaries (/usr/lib/postgresql/*/bin) for a private instance")
	}
	sort.Slice(bins, func(i, j int) bool { return versionOf(bins[i]) < versionOf(bins[j]) })
	p := &PrivatePostgres{t: t, bin: filepath.Dir(bins[len(bins)-1])}
	if os.Geteuid() == 0 {
		p.runAs = "postgres"
	}
	dir, err := os.MkdirTemp("", "queuebox-faults-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	p.dataDir = filepath.Join(dir, "data")
	if p.runAs != "" {
		u, err := user.Lookup(p.runAs)
		if err != nil {
			t.Fatalf("private PostgreSQL: running as root needs the user %s: %v", p.runAs, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	p.port = freePort(t)
	p.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
	if out, err := p.command("initdb", "-D", p.dataDir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("private PostgreSQL: initdb: %v\n%s", err, out)
	}
	p.Start()
	t.Cleanup(func() { _, _ = p.command("pg_ctl", "-D", p.dataDir, "-m", "immediate", "-w", "stop").CombinedOutput() })
	return p
}

func versionOf(path string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return v
}

func (p *PrivatePostgres) command(name string, args ...string) *exec.Cmd {
	bin := filepath.Join(p.bin, name)
	if p.runAs != "" {
		return exec.Command("runuser", append([]string{"-u", p.runAs, "--", bin}, args...)...)
	}
	return exec.Command(bin, args...)
}

func (p *PrivatePostgres) options() string {
	return fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 -c shared_buffers=64MB", p.port)
}

// Start starts the (stopped) instance and waits until it accepts
// connections.
func (p *PrivatePostgres) Start() {
	p.t.Helper()
	logFile := filepath.Join(filepath.Dir(p.dataDir), "postgres.log")
	if out, err := p.command("pg_ctl", "-D", p.dataDir, "-l", logFile, "-o", p.options(), "-w", "-t", "60", "start").CombinedOutput(); err != nil {
		p.t.Fatalf("private PostgreSQL: pg_ctl start: %v\n%s", err, out)
	}
	p.WaitReady(60 * time.Second)
}

// Stop stops the instance; mode is a pg_ctl shutdown mode (smart, fast,
// immediate).
func (p *PrivatePostgres) Stop(mode string) {
	p.t.Helper()
	if out, err := p.command("pg_ctl", "-D", p.dataDir, "-m", mode, "-w", "-t", "60", "stop").CombinedOutput(); err != nil {
		p.t.Fatalf("private PostgreSQL: pg_ctl stop: %v\n%s", err, out)
	}
}

// WaitReady waits until the instance accepts a query.
func (p *PrivatePostgres) WaitReady(within time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, p.URL)
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT 1")
			_ = conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("private PostgreSQL on port %d not ready within %v: %v", p.port, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Port is the TCP port the instance listens on.
func (p *PrivatePostgres) Port() int { return p.port }

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
