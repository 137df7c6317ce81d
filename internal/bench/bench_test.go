package bench

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testenv"
)

// TestSmoke runs a tiny bench (2,000 rows, NATS keyed, one replica of the
// freshly built binary) and checks only that it completes with every row
// delivered and figures that make sense. No timing assertions: this
// machine is shared.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and drains 2,000 rows twice")
	}
	pgURL := testenv.Env("QUEUEBOX_TEST_POSTGRES_URL", testenv.DefaultPostgresURL)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := probePostgres(ctx, pgURL); err != nil {
		testenv.Unavailable(t, "PostgreSQL", err)
		return
	}
	bin := filepath.Join(t.TempDir(), "queuebox")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/queuebox/queuebox/cmd/queuebox").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	o := Defaults()
	o.DatabaseURL = pgURL
	o.Binary = bin
	o.Rows, o.Keys, o.BatchSize = 2_000, 50, 100
	o.Replicas = []int{1}
	o.Cases = []string{"nats-keyed"}
	o.IdleWindow = time.Second
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed() || len(rep.Drains) != 1 || len(rep.Drains[0].Relay) != 1 {
		t.Fatalf("bench did not complete: %+v", rep)
	}
	d := rep.Drains[0]
	rr := d.Relay[0]
	if d.Bare <= 0 || rr.RowsPerSec <= 0 || rr.Ratio <= 0 || rr.CPUPer10k <= 0 || rr.PeakRSSMiB <= 0 {
		t.Errorf("figures not positive: bare %v, relay %+v", d.Bare, rr)
	}
	if rr.IdleQPS < 0 || rr.IdleCPU < 0 {
		t.Errorf("negative idle cost: %+v", rr)
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
