package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestReadBuildInfo: the linker flags win; without them the module version,
// the VCS revision (with -dirty) and the commit time come from the build
// information; with neither, "devel" and "unknown".
func TestReadBuildInfo(t *testing.T) {
	vcs := func(rev, at, modified string) *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev},
			{Key: "vcs.time", Value: at}, {Key: "vcs.modified", Value: modified},
		}}
	}
	for _, tc := range []struct {
		name                string
		version, rev, date  string
		bi                  *debug.BuildInfo
		wantV, wantR, wantD string
		wantGo              string
	}{
		{name: "ldflags", version: "v0.1.0", rev: "abc123", date: "2026-12-03T10:00:00Z",
			bi:    vcs("fff", "2020-01-01T00:00:00Z", "true"),
			wantV: "v0.1.0", wantR: "abc123", wantD: "2026-12-03T10:00:00Z", wantGo: "go1.26.1"},
		{name: "go build in a clean checkout", bi: vcs("0123456789abcdef", "2026-12-01T09:30:00Z", "false"),
			wantV: "devel", wantR: "0123456789abcdef", wantD: "2026-12-01T09:30:00Z", wantGo: "go1.26.1"},
		{name: "go build with uncommitted changes", bi: vcs("0123456789abcdef", "2026-12-01T09:30:00Z", "true"),
			wantV: "devel", wantR: "0123456789abcdef-dirty", wantD: "2026-12-01T09:30:00Z", wantGo: "go1.26.1"},
		{name: "go install @v0.1.0", bi: &debug.BuildInfo{GoVersion: "go1.26.2", Main: debug.Module{Path: "github.com/queuebox/queuebox", Version: "v0.1.0"}},
			wantV: "v0.1.0", wantR: unknown, wantD: unknown, wantGo: "go1.26.2"},
		{name: "go build in a checkout (Go's pseudo-version)", bi: &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261201093000-0123456789ab+dirty"}},
			wantV: "v0.0.0-20261201093000-0123456789ab+dirty", wantR: unknown, wantD: unknown, wantGo: runtime.Version()},
		{name: "nothing known", wantV: "devel", wantR: unknown, wantD: unknown, wantGo: runtime.Version()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := readBuildInfo(tc.version, tc.rev, tc.date, tc.bi)
			if got.Version != tc.wantV || got.Revision != tc.wantR || got.BuildDate != tc.wantD || got.GoVersion != tc.wantGo {
				t.Errorf("got %+v, want version %q revision %q date %q go %q", got, tc.wantV, tc.wantR, tc.wantD, tc.wantGo)
			}
			if got.Platform != runtime.GOOS+"/"+runtime.GOARCH {
				t.Errorf("platform %q", got.Platform)
			}
		})
	}
}

// TestVersionCommand runs `queuebox version` on the test binary (built
// without linker flags or VCS stamps: devel) and on one built with the
// release's linker flags, in text and JSON.
func TestVersionCommand(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(binPath, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("version -o json: %v", err)
	}
	var b buildInfo
	if err := json.Unmarshal(out, &b); err != nil {
		t.Fatalf("version -o json is not JSON: %v\n%s", err, out)
	}
	if b.Version == "" || b.Revision == "" || b.BuildDate == "" || !strings.HasPrefix(b.GoVersion, "go") {
		t.Errorf("version -o json = %+v: every field must be set", b)
	}

	bin := filepath.Join(t.TempDir(), "queuebox")
	ldflags := "-X main.version=v9.8.7 -X main.revision=0123abc -X main.buildDate=2026-12-03T10:00:00Z"
	build := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	text, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"queuebox v9.8.7\n", "revision:   0123abc\n", "build date: 2026-12-03T10:00:00Z\n", "go:         go1."} {
		if !bytes.Contains(text, []byte(want)) {
			t.Errorf("version output lacks %q:\n%s", want, text)
		}
	}
	cmd := exec.Command(bin, "version", "-o", "yaml")
	if err := cmd.Run(); err == nil || cmd.ProcessState.ExitCode() != 2 {
		t.Errorf("version -o yaml: %v, want exit status 2", err)
	}
}

// TestVersionFromVCS: a plain go build in a git checkout reports the
// checkout's commit.
func TestVersionFromVCS(t *testing.T) {
	t.Parallel()
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skip("not a git checkout:", err)
	}
	bin := filepath.Join(t.TempDir(), "queuebox")
	// GOFLAGS may turn VCS stamping off; the flag turns it back on.
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version", "-o", "json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var b buildInfo
	if err := json.Unmarshal(out, &b); err != nil {
		t.Fatal(err)
	}
	// HEAD is read before and after the build: a commit may land between.
	after, _ := exec.Command("git", "rev-parse", "HEAD").Output()
	rev, _ := strings.CutSuffix(b.Revision, "-dirty")
	if rev != strings.TrimSpace(string(head)) && rev != strings.TrimSpace(string(after)) {
		t.Errorf("revision %q, want HEAD %s (with -dirty if the tree has changes)", b.Revision, head)
	}
	if b.BuildDate == unknown || b.Version == "" {
		t.Errorf("%+v: want the commit's date and a version", b)
	}
}
