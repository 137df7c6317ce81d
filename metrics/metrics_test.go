package metrics

import (
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// documented reads the metric names of the table in docs/metrics.md: the
// first column, `queuebox_...` in backticks.
func documented(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?m)^\\| `(queuebox_[a-z_]+)` \\|")
	var names []string
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		names = append(names, m[1])
	}
	if len(names) == 0 {
		t.Fatal("docs/metrics.md has no metric table")
	}
	sort.Strings(names)
	return names
}

// TestDocumentedMetricsMatchScrape registers the metrics, configures one
// destination, reports the one event whose labels come from the destination
// (the limit of a back-pressure answer) and the build, and checks that the queuebox_*
// families of a scrape are exactly the documented ones.
func TestDocumentedMetricsMatchScrape(t *testing.T) {
	m := New()
	m.InitDestination("hooks")
	m.Backpressure("hooks", "http_429")
	m.SetBuildInfo("v0.1.0", "abc", "go1.26.0")
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var scraped []string
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), Namespace+"_") {
			scraped = append(scraped, f.GetName())
		}
	}
	sort.Strings(scraped)
	docs := documented(t)
	for _, n := range scraped {
		if !slices.Contains(docs, n) {
			t.Errorf("%s is exposed but not documented in docs/metrics.md", n)
		}
	}
	for _, n := range docs {
		if !slices.Contains(scraped, n) {
			t.Errorf("%s is documented in docs/metrics.md but not exposed", n)
		}
	}
}

// TestRetentionCounter checks the retention counter's labels and values.
func TestRetentionCounter(t *testing.T) {
	m := New()
	m.Purged("sent", 1000)
	m.Purged("sent", 500)
	if got := testutil.ToFloat64(m.purged.WithLabelValues("sent")); got != 1500 {
		t.Errorf("sent = %v", got)
	}
	if got := testutil.ToFloat64(m.purged.WithLabelValues("dead")); got != 0 {
		t.Errorf("dead = %v", got)
	}
	m.Claimed(3, 500, time.Millisecond, nil)
	if got := testutil.ToFloat64(m.inflight); got != 3 {
		t.Errorf("inflight = %v", got)
	}
	if got := testutil.ToFloat64(m.claimLimit); got != 500 {
		t.Errorf("claim limit = %v", got)
	}
}

// TestBuildInfo checks that queuebox_build_info is one series at 1 with the
// last build's labels.
func TestBuildInfo(t *testing.T) {
	m := New()
	m.SetBuildInfo("devel", "unknown", "go1.26.0")
	m.SetBuildInfo("v0.1.0", "0123abc", "go1.26.1")
	if n := testutil.CollectAndCount(m.buildInfo); n != 1 {
		t.Fatalf("%d build_info series, want 1", n)
	}
	if got := testutil.ToFloat64(m.buildInfo.WithLabelValues("v0.1.0", "0123abc", "go1.26.1")); got != 1 {
		t.Errorf("build_info = %v, want 1", got)
	}
}

// TestRowHeadersDropped checks the dropped-header counter: at zero for a
// configured destination, one per drop.
func TestRowHeadersDropped(t *testing.T) {
	m := New()
	m.InitDestination("events")
	if got := testutil.ToFloat64(m.headersDropped.WithLabelValues("events")); got != 0 {
		t.Errorf("before any drop = %v", got)
	}
	m.RowHeaderDropped("events")
	m.RowHeaderDropped("events")
	if got := testutil.ToFloat64(m.headersDropped.WithLabelValues("events")); got != 2 {
		t.Errorf("after two drops = %v", got)
	}
}
