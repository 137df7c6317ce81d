package testenv

// The binary-test harness: build the queuebox binary once per test process,
// run it as a child process whose output is captured, stop it, find its
// management address and read its metrics.

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// QueueboxPackage is the import path of the binary BuildQueueboxOnce builds.
const QueueboxPackage = "github.com/queuebox/queuebox/cmd/queuebox"

var (
	buildOnce sync.Once
	buildDir  string
	buildPath string
	buildErr  error
)

// BuildQueueboxOnce builds the queuebox binary into a temporary directory
// the first time it is called in this process and returns its path; later
// calls return the same path (or the same error). It needs no *testing.T,
// so TestMain can call it; pair it with RemoveQueuebox after m.Run.
func BuildQueueboxOnce() (string, error) {
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "queuebox-bin-")
		if buildErr != nil {
			return
		}
		buildPath = filepath.Join(buildDir, "queuebox")
		out, err := exec.Command("go", "build", "-o", buildPath, QueueboxPackage).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("building queuebox: %v\n%s", err, out)
		}
	})
	return buildPath, buildErr
}

// RemoveQueuebox deletes the directory BuildQueueboxOnce built into, if it
// built. Call it from TestMain after m.Run.
func RemoveQueuebox() {
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
}

// BuildQueuebox is BuildQueueboxOnce for a test: it fails t when the build
// failed. The package's TestMain should call RemoveQueuebox.
func BuildQueuebox(t testing.TB) string {
	t.Helper()
	path, err := BuildQueueboxOnce()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// ProcessLogTail is how many lines of its output a Process logs when its
// test failed; with QUEUEBOX_TEST_LOGS set to a directory, the whole output
// is also written there.
const ProcessLogTail = 40

// Process is one running queuebox process. Its stdout and stderr are
// captured together (see Logs). When the test ends the process is killed
// if still running (after a SIGCONT, in case the test stopped it), and its
// last output is logged if the test failed.
type Process struct {
	t    testing.TB
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs bytes.Buffer
	done chan struct{}
}

// Start runs bin with args as a process named name (for messages), with
// QUEUEBOX_CONFIG cleared from the environment.
func Start(t testing.TB, bin, name string, args ...string) *Process {
	t.Helper()
	p := &Process{t: t, name: name, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = (*processOutput)(p), (*processOutput)(p)
	p.cmd.Env = append(os.Environ(), "QUEUEBOX_CONFIG=")
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start queuebox: %v", err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.Exited() {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			p.Kill()
		}
		if t.Failed() {
			t.Logf("queuebox %s output (tail):\n%s", p.name, Tail(p.Logs(), ProcessLogTail))
			if dir := os.Getenv("QUEUEBOX_TEST_LOGS"); dir != "" {
				f := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()+"-"+p.name)+".log")
				if err := os.WriteFile(f, []byte(p.Logs()), 0o644); err == nil {
					t.Logf("queuebox %s output: %s", p.name, f)
				}
			}
		}
	})
	return p
}

// processOutput collects a Process's output.
type processOutput Process

func (o *processOutput) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.logs.Write(b)
}

// Name is the name the process was started with.
func (p *Process) Name() string { return p.name }

// Logs returns everything the process wrote so far.
func (p *Process) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the process without waiting.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stop sends sig and returns the exit status, failing the test when the
// process has not exited within the given time.
func (p *Process) Stop(sig os.Signal, within time.Duration) int {
	p.t.Helper()
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(within):
		p.t.Fatalf("queuebox %s did not exit within %v after %v", p.name, within, sig)
	}
	return p.cmd.ProcessState.ExitCode()
}

var listenRE = regexp.MustCompile(`management server listening"? addr=(\S+)`)

// ManagementAddr waits up to 30s for the process to log the address of its
// management server and returns it. It fails the test when none is logged
// or the process exits first.
func (p *Process) ManagementAddr() string {
	p.t.Helper()
	var addr string
	Eventually(p.t, 30*time.Second, func() bool {
		if m := listenRE.FindStringSubmatch(p.Logs()); m != nil {
			addr = m[1]
		}
		return addr != "" || p.Exited()
	}, "queuebox %s logged no management address", p.name)
	if addr == "" {
		p.t.Fatalf("queuebox %s exited at start:\n%s", p.name, Tail(p.Logs(), 30))
	}
	return addr
}

// Tail returns the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Scrape returns the /metrics text of the management server at addr.
func Scrape(t testing.TB, addr string) string {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// LookupMetric returns the value of the series whose line starts with
// series (metric name and labels, exactly as exposed) and whether the text
// has that line.
func LookupMetric(text, series string) (float64, bool) {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, series+" ") {
			f, _ := strconv.ParseFloat(strings.TrimSpace(l[len(series):]), 64)
			return f, true
		}
	}
	return 0, false
}

// Metric is LookupMetric with 0 for an absent series.
func Metric(text, series string) float64 {
	f, _ := LookupMetric(text, series)
	return f
}
