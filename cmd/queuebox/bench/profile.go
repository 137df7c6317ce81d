package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
)

// profileSpec says where a drain's CPU profile goes and how long it runs.
type profileSpec struct {
	path    string // "" = no profile
	seconds int
}

func profilePath(dir, name string, replicas int) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, fmt.Sprintf("%s-x%d.pprof", name, replicas))
}

// profileSeconds is about as long as the drain should take: the bare
// loop's time for the same rows, at least one second.
func profileSeconds(rows int, bareRowsPerSec float64) int {
	if bareRowsPerSec <= 0 {
		return 5
	}
	return max(1, int(math.Round(float64(rows)/bareRowsPerSec)))
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(ctx context.Context) (string, error) {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// fetchProfile takes a CPU profile from the relay's /debug/pprof/profile
// (server.pprof) and writes it to p.path.
func fetchProfile(ctx context.Context, addr string, p profileSpec) error {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, p.seconds)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(p.path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(p.path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
