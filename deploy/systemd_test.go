package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/queuebox/queuebox/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveQueuebox()
	os.Exit(code)
}

// TestSystemdUnit checks deploy/systemd/queuebox.service: a dynamic user,
// the hardening options, a restart on failure, and an ExecStart whose
// command and flags the binary knows. Where systemd-analyze is installed
// it also verifies the unit, with ExecStart pointed at the built binary.
func TestSystemdUnit(t *testing.T) {
	unit := readFile(t, "systemd/queuebox.service")
	settings := map[string][]string{}
	for _, line := range strings.Split(string(unit), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Errorf("not a setting: %q", line)
			continue
		}
		settings[k] = append(settings[k], v)
	}
	for k, want := range map[string]string{
		"DynamicUser": "yes", "Restart": "on-failure", "NoNewPrivileges": "yes", "ProtectSystem": "strict",
		"ProtectHome": "yes", "PrivateTmp": "yes", "PrivateDevices": "yes", "CapabilityBoundingSet": "",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX", "MemoryDenyWriteExecute": "yes", "KillSignal": "SIGTERM",
	} {
		if got := settings[k]; len(got) != 1 || got[0] != want {
			t.Errorf("%s=%q, want %q", k, got, want)
		}
	}

	bin := testenv.BuildQueuebox(t)
	exec0 := strings.Fields(settings["ExecStart"][0])
	if len(exec0) < 2 || filepath.Base(exec0[0]) != "queuebox" {
		t.Fatalf("ExecStart %q does not run queuebox", settings["ExecStart"][0])
	}
	args := exec0[1:]
	help, err := exec.Command(bin, append(commandOf(args), "--help")...).CombinedOutput()
	if err != nil {
		t.Fatalf("queuebox %s --help: %v\n%s", strings.Join(commandOf(args), " "), err, help)
	}
	for _, a := range args {
		if name, ok := strings.CutPrefix(a, "--"); ok {
			if name, _, _ = strings.Cut(name, "="); !bytes.Contains(help, []byte("--"+name+" ")) {
				t.Errorf("ExecStart: %s is not a flag of queuebox %s", a, strings.Join(commandOf(args), " "))
			}
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze is not installed: the unit's syntax is not verified")
		return
	}
	dir := t.TempDir()
	local := bytes.ReplaceAll(unit, []byte(exec0[0]), []byte(bin))
	if err := os.WriteFile(filepath.Join(dir, "queuebox.service"), local, 0o644); err != nil {
		t.Fatal(err)
	}
	// It exits 0 on a setting it ignores, but names the file.
	out, err := exec.Command(analyze, "verify", filepath.Join(dir, "queuebox.service")).CombinedOutput()
	if err != nil || bytes.Contains(out, []byte("queuebox.service")) {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
