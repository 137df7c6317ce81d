package deploy

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/queuebox/queuebox/metrics"
)

// ruleFile is the shape of deploy/prometheus/alerts.yaml.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// promExpr is one PromQL expression and where it was found.
type promExpr struct{ where, expr string }

// TestPromQLNamesExposedMetrics parses every PromQL expression of the alerts
// and the dashboard and checks that each metric it selects is one queuebox
// exposes (or Prometheus's own up): a renamed or removed metric would
// otherwise leave an alert that never fires and an empty panel.
func TestPromQLNamesExposedMetrics(t *testing.T) {
	exposed := exposedMetrics(t)
	exprs := append(alertExprs(t), dashboardExprs(t)...)
	if len(exprs) < 10 {
		t.Fatalf("found only %d expressions", len(exprs))
	}
	p := parser.NewParser(parser.Options{})
	for _, e := range exprs {
		ast, err := p.ParseExpr(grafanaVars.Replace(e.expr))
		if err != nil {
			t.Errorf("%s: %v\n%s", e.where, err, e.expr)
			continue
		}
		names := 0
		parser.Inspect(ast, func(n parser.Node, _ []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == "__name__" {
					name = m.Value
				}
			}
			names++
			if name != "up" && !exposed[name] {
				t.Errorf("%s: %s is not a metric queuebox exposes (docs/metrics.md)", e.where, name)
			}
			return nil
		})
		if names == 0 {
			t.Errorf("%s selects no metric: %s", e.where, e.expr)
		}
	}
}

// grafanaVars turns the dashboard's variables into what PromQL accepts.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h",
	"${job}", ".*", "$job", ".*", "${instance}", ".*", "$instance", ".*",
)

// TestAlertRules checks what the alerts' unit tests do not: every alert has
// a severity, a summary and a runbook, and the chart's PrometheusRule
// carries the same file.
func TestAlertRules(t *testing.T) {
	var rf ruleFile
	b := readFile(t, "prometheus/alerts.yaml")
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts = append(alerts, r.Alert)
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s: no %s annotation", r.Alert, a)
				}
			}
		}
	}
	// The list: backlog age, dead rows rising, circuit open, claims
	// lost, relay down, retention falling behind.
	for _, want := range []string{"QueueboxBacklogAge", "QueueboxDeadRowsRising", "QueueboxCircuitOpen", "QueueboxClaimsLost", "QueueboxRelayDown", "QueueboxRetentionFallingBehind"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alerts.yaml has no %s", want)
		}
	}
	tested := readFile(t, "prometheus/alerts_test.yaml")
	for _, a := range alerts {
		if !bytes.Contains(tested, []byte("alertname: "+a+"\n")) {
			t.Errorf("%s has no unit test in alerts_test.yaml", a)
		}
	}
	if chart := readFile(t, "helm/queuebox/files/alerts.yaml"); !bytes.Equal(chart, b) {
		t.Error("helm/queuebox/files/alerts.yaml differs from prometheus/alerts.yaml: cp deploy/prometheus/alerts.yaml deploy/helm/queuebox/files/")
	}
}

func alertExprs(t *testing.T) []promExpr {
	t.Helper()
	var rf ruleFile
	if err := yaml.Unmarshal(readFile(t, "prometheus/alerts.yaml"), &rf); err != nil {
		t.Fatal(err)
	}
	var out []promExpr
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			out = append(out, promExpr{"alerts.yaml " + r.Alert + r.Record, r.Expr})
		}
	}
	return out
}

// labelValues is Grafana's label_values(selector, label) variable query.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_]+\)$`)

func dashboardExprs(t *testing.T) []promExpr {
	t.Helper()
	var dash struct {
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
		Panels []dashPanel `json:"panels"`
	}
	if err := json.Unmarshal(readFile(t, "grafana/queuebox.json"), &dash); err != nil {
		t.Fatalf("grafana/queuebox.json: %v", err)
	}
	var out []promExpr
	var walk func([]dashPanel)
	ids := map[int]bool{}
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("dashboard: panel id %d twice", p.ID)
			}
			ids[p.ID] = true
			for _, tg := range p.Targets {
				out = append(out, promExpr{"queuebox.json panel " + p.Title + " " + tg.RefID, tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	for _, v := range dash.Templating.List {
		if m := labelValues.FindStringSubmatch(v.Definition); m != nil {
			out = append(out, promExpr{"queuebox.json variable " + v.Name, m[1]})
		}
	}
	return out
}

type dashPanel struct {
	ID      int    `json:"id"`
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

// exposedMetrics is every series name a queuebox scrape can hold: the
// families of metrics.New() with a destination configured and every
// labelled series reported once, and the table of docs/metrics.md (which
// metrics_test keeps equal to the scrape); histograms with their _bucket,
// _sum and _count.
func exposedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	m := metrics.New()
	m.InitDestination("hooks")
	m.Backpressure("hooks", "http_429")
	m.SetBuildInfo("v0.1.0", "abc", "go1.26.0")
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	add := func(name string, histogram bool) {
		out[name] = true
		if histogram {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[name+s] = true
			}
		}
	}
	for _, f := range families {
		add(f.GetName(), f.GetType().String() == "HISTOGRAM" || f.GetType().String() == "SUMMARY")
	}
	row := regexp.MustCompile("(?m)^\\| `(queuebox_[a-z_]+)` \\| ([a-z]+) \\|")
	for _, r := range row.FindAllStringSubmatch(string(readFile(t, "../docs/metrics.md")), -1) {
		add(r[1], r[2] == "histogram")
	}
	if !out["queuebox_build_info"] {
		names := make([]string, 0, len(out))
		for n := range out {
			names = append(names, n)
		}
		sort.Strings(names)
		t.Fatalf("queuebox_build_info is not among the exposed metrics: %v", names)
	}
	return out
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
