package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"

	"github.com/queuebox/queuebox/config"
	"github.com/queuebox/queuebox/internal/testenv"
)

// chartDir is the Helm chart, relative to this package.
const chartDir = "helm/queuebox"

// TestChart lints the chart and renders it with QUEUEBOX_HELM (a helm
// command; make test-chart sets it), then checks the manifests against the
// binary: the probes ask the port of server.listen in the rendered config
// for /health/live and /health/ready, the container's args are a real
// command and real flags, and the pods run as a non-root user on a
// read-only root file system with no capabilities.
func TestChart(t *testing.T) {
	helm := strings.Fields(os.Getenv("QUEUEBOX_HELM"))
	if len(helm) == 0 {
		t.Skip("skipping: QUEUEBOX_HELM is not set (make test-chart sets it)")
	}
	run := func(args ...string) ([]byte, error) {
		cmd := exec.Command(helm[0], append(helm[1:], args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return out, fmt.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return out, nil
	}
	if out, err := run("lint", "--strict", chartDir); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	bin := testenv.BuildQueuebox(t)

	t.Run("defaults", func(t *testing.T) {
		out, err := run("template", "q", chartDir)
		if err != nil {
			t.Fatal(err)
		}
		m := parseManifests(t, out)
		d := checkWorkload(t, bin, m, "Deployment")
		if got := dig(d, "spec", "replicas"); fmt.Sprint(got) != "2" {
			t.Errorf("replicas %v, want 2", got)
		}
		ru := dig(d, "spec", "strategy", "rollingUpdate")
		if fmt.Sprint(dig(ru, "maxUnavailable")) != "0" || fmt.Sprint(dig(ru, "maxSurge")) != "1" {
			t.Errorf("rollingUpdate %v, want maxUnavailable 0 and maxSurge 1", ru)
		}
		pdb := m.one(t, "PodDisruptionBudget")
		if got := dig(pdb, "spec", "selector", "matchLabels"); !subset(got, dig(d, "spec", "template", "metadata", "labels")) {
			t.Errorf("the PodDisruptionBudget selects %v, not the pods", got)
		}
		if ports := containerOf(t, d)["ports"].([]any); len(ports) != 1 {
			t.Errorf("container ports %v: want the management port alone without an inbox", ports)
		}
		for _, kind := range []string{"ServiceMonitor", "PrometheusRule", "Job"} {
			if len(m.all(kind)) != 0 {
				t.Errorf("a %s by default", kind)
			}
		}
	})

	t.Run("own config with monitoring and migrations", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "queuebox.yaml")
		if err := os.WriteFile(cfg, []byte(`database:
  url: ${DATABASE_URL}
  outboxTable: messaging.outbox
server:
  listen: 0.0.0.0:9191
  readiness: strict
destinations:
  events:
    type: nats
    servers: ["${NATS_URL}"]
    subject: "{{ topic }}"
routes:
  - topicPattern: "**"
    destination: events
`), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := run("template", "relay", chartDir, "--set-file", "config="+cfg,
			"--set", "serviceMonitor.enabled=true,prometheusRule.enabled=true,migrations.enabled=true,replicaCount=3",
			"--set", "extraArgs={--log-level,debug}", "--set", "secret.env.DATABASE_URL=postgres://u:p@db/app")
		if err != nil {
			t.Fatal(err)
		}
		m := parseManifests(t, out)
		d := checkWorkload(t, bin, m, "Deployment")
		if port := containerOf(t, d)["ports"].([]any)[0].(map[string]any)["containerPort"]; fmt.Sprint(port) != "9191" {
			t.Errorf("containerPort %v, want 9191 from server.listen", port)
		}
		if !slices.Contains(stringsOf(containerOf(t, d)["args"]), "debug") {
			t.Errorf("extraArgs are not passed: %v", containerOf(t, d)["args"])
		}
		checkWorkload(t, bin, m, "Job")

		svc := m.one(t, "Service")
		sm := m.one(t, "ServiceMonitor")
		smPort := dig(sm, "spec", "endpoints").([]any)[0].(map[string]any)["port"]
		svcPort := dig(svc, "spec", "ports").([]any)[0].(map[string]any)
		if smPort != svcPort["name"] || fmt.Sprint(svcPort["port"]) != "9191" {
			t.Errorf("ServiceMonitor port %v, Service port %v: want the Service's 9191 by name", smPort, svcPort)
		}
		rule := m.one(t, "PrometheusRule")
		if groups, _ := dig(rule, "spec", "groups").([]any); len(groups) == 0 {
			t.Error("the PrometheusRule has no rule groups")
		}
	})

	t.Run("a loopback listen address is refused", func(t *testing.T) {
		_, err := run("template", "q", chartDir, "--set", "config=server: {listen: 127.0.0.1:9090}")
		if err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("rendered with listen 127.0.0.1:9090 (err %v); want a refusal naming the loopback address", err)
		}
	})

	t.Run("the inbox's ingest port", func(t *testing.T) {
		cfg := "config=server: {listen: 0.0.0.0:9090}\ninbox: {listen: 0.0.0.0:8081}"
		out, err := run("template", "q", chartDir, "--set", cfg)
		if err != nil {
			t.Fatal(err)
		}
		m := parseManifests(t, out)
		ports := map[string]string{}
		for _, p := range containerOf(t, m.one(t, "Deployment"))["ports"].([]any) {
			ports[fmt.Sprint(p.(map[string]any)["name"])] = fmt.Sprint(p.(map[string]any)["containerPort"])
		}
		if ports["ingest"] != "8081" || ports["management"] != "9090" {
			t.Errorf("container ports %v, want management 9090 and ingest 8081", ports)
		}
		svc := map[string]string{}
		for _, p := range dig(m.one(t, "Service"), "spec", "ports").([]any) {
			svc[fmt.Sprint(p.(map[string]any)["name"])] = fmt.Sprint(p.(map[string]any)["port"]) + "->" + fmt.Sprint(p.(map[string]any)["targetPort"])
		}
		if svc["ingest"] != "8081->ingest" {
			t.Errorf("Service ports %v, want ingest 8081 to the container's ingest port", svc)
		}
		if _, err := run("template", "q", chartDir, "--set", "config=server: {listen: 0.0.0.0:9090}\ninbox: {listen: 127.0.0.1:8081}"); err == nil || !strings.Contains(err.Error(), "inbox.listen") {
			t.Errorf("rendered with inbox.listen 127.0.0.1:8081 (err %v); want a refusal naming inbox.listen", err)
		}
	})

	t.Run("values are checked against the schema", func(t *testing.T) {
		_, err := run("template", "q", chartDir, "--set", "replicaCount=two")
		if err == nil {
			t.Error("rendered with replicaCount=two")
		}
	})
}

// checkWorkload checks the one object of kind (a Deployment or the
// migration Job) against the binary and returns it.
func checkWorkload(t *testing.T, bin string, m manifests, kind string) map[string]any {
	t.Helper()
	w := m.one(t, kind)
	pod := dig(w, "spec", "template", "spec").(map[string]any)
	c := containerOf(t, w)

	// The config the container reads: the mounted ConfigMap's file.
	args := stringsOf(c["args"])
	i := slices.Index(args, "--config")
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("%s: args %v name no --config", kind, args)
	}
	cfgPath := args[i+1]
	cfg := mountedConfig(t, m, pod, c, cfgPath)

	// The args: a command of the binary, then only its flags.
	help, err := exec.Command(bin, append(commandOf(args), "--help")...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: queuebox %s --help: %v\n%s", kind, strings.Join(commandOf(args), " "), err, help)
	}
	for _, a := range args {
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, _, _ = strings.Cut(name, "=")
			if !bytes.Contains(help, []byte("--"+name+" ")) {
				t.Errorf("%s: %s is not a flag of queuebox %s", kind, a, strings.Join(commandOf(args), " "))
			}
		}
	}

	// Security: a non-root user, nothing to write, nothing to gain.
	psc, _ := pod["securityContext"].(map[string]any)
	csc, _ := c["securityContext"].(map[string]any)
	either := func(key string) any {
		if v, ok := csc[key]; ok {
			return v
		}
		return psc[key]
	}
	if either("runAsNonRoot") != true {
		t.Errorf("%s: runAsNonRoot is not true", kind)
	}
	if csc["readOnlyRootFilesystem"] != true {
		t.Errorf("%s: readOnlyRootFilesystem is not true", kind)
	}
	if csc["allowPrivilegeEscalation"] != false {
		t.Errorf("%s: allowPrivilegeEscalation is not false", kind)
	}
	if !slices.Contains(stringsOf(dig(csc, "capabilities", "drop")), "ALL") {
		t.Errorf("%s: capabilities do not drop ALL", kind)
	}
	if fmt.Sprint(dig(either("seccompProfile"), "type")) != "RuntimeDefault" {
		t.Errorf("%s: seccompProfile is not RuntimeDefault", kind)
	}
	if u := fmt.Sprint(psc["runAsUser"]); u != "65532" {
		t.Errorf("%s: runAsUser %s, want the image's 65532", kind, u)
	}
	if r, _ := c["resources"].(map[string]any); len(r) == 0 {
		t.Errorf("%s: no resources", kind)
	}
	if kind != "Deployment" {
		return w
	}

	// Probes: the paths of the management server, on server.listen's port.
	_, port, err := net.SplitHostPort(cfg.Server.Listen)
	if err != nil {
		t.Fatalf("server.listen %q: %v", cfg.Server.Listen, err)
	}
	for probe, path := range map[string]string{"startupProbe": "/health/live", "livenessProbe": "/health/live", "readinessProbe": "/health/ready"} {
		get := dig(c, probe, "httpGet")
		if get == nil {
			t.Errorf("no %s", probe)
			continue
		}
		if p := fmt.Sprint(dig(get, "path")); p != path {
			t.Errorf("%s path %s, want %s", probe, p, path)
		}
		if p := fmt.Sprint(dig(get, "port")); p != port {
			t.Errorf("%s port %s, want %s from server.listen %s", probe, p, port, cfg.Server.Listen)
		}
	}
	return w
}

// mountedConfig finds the ConfigMap key mounted at path in container c of
// pod and parses it as queuebox would, with every ${VAR} set.
func mountedConfig(t *testing.T, m manifests, pod, c map[string]any, path string) *config.Config {
	t.Helper()
	dir, file := filepath.Dir(path), filepath.Base(path)
	var volume string
	for _, vm := range c["volumeMounts"].([]any) {
		vm := vm.(map[string]any)
		if vm["mountPath"] == dir {
			volume = fmt.Sprint(vm["name"])
		}
	}
	var cmName string
	for _, v := range pod["volumes"].([]any) {
		v := v.(map[string]any)
		if v["name"] == volume {
			cmName = fmt.Sprint(dig(v, "configMap", "name"))
		}
	}
	for _, cm := range m.all("ConfigMap") {
		if dig(cm, "metadata", "name") != cmName {
			continue
		}
		data, ok := dig(cm, "data", file).(string)
		if !ok {
			t.Fatalf("ConfigMap %s has no %s", cmName, file)
		}
		cfg, err := config.Parse([]byte(data), func(name string) (string, bool) {
			return map[string]string{"DATABASE_URL": "postgres://u:p@db:5432/app", "WEBHOOK_URL": "https://hooks.example.com", "NATS_URL": "nats://nats:4222"}[name], true
		})
		if err != nil {
			t.Fatalf("the config in ConfigMap %s does not load: %v\n%s", cmName, err, data)
		}
		return cfg
	}
	t.Fatalf("%s is not mounted from a ConfigMap (volume %q, ConfigMap %q)", path, volume, cmName)
	return nil
}

// commandOf returns the leading words of args that are not flags: the
// subcommand (run, or migrate up).
func commandOf(args []string) []string {
	for i, a := range args {
		if strings.HasPrefix(a, "-") {
			return slices.Clone(args[:i])
		}
	}
	return slices.Clone(args)
}

type manifests []map[string]any

func parseManifests(t *testing.T, b []byte) manifests {
	t.Helper()
	var m manifests
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("rendered manifests: %v\n%s", err, b)
		}
		if doc != nil {
			m = append(m, doc)
		}
	}
	return m
}

func (m manifests) all(kind string) []map[string]any {
	var out []map[string]any
	for _, d := range m {
		if d["kind"] == kind {
			out = append(out, d)
		}
	}
	return out
}

func (m manifests) one(t *testing.T, kind string) map[string]any {
	t.Helper()
	all := m.all(kind)
	if len(all) != 1 {
		t.Fatalf("%d %s objects, want 1", len(all), kind)
	}
	return all[0]
}

func containerOf(t *testing.T, w map[string]any) map[string]any {
	t.Helper()
	cs, _ := dig(w, "spec", "template", "spec", "containers").([]any)
	if len(cs) != 1 {
		t.Fatalf("%v: %d containers, want 1", w["kind"], len(cs))
	}
	return cs[0].(map[string]any)
}

// dig follows keys through nested maps; nil when one is missing.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func stringsOf(v any) []string {
	l, _ := v.([]any)
	out := make([]string, len(l))
	for i, e := range l {
		out[i] = fmt.Sprint(e)
	}
	return out
}

// subset reports whether every key of a is in b with the same value.
func subset(a, b any) bool {
	am, _ := a.(map[string]any)
	bm, _ := b.(map[string]any)
	if len(am) == 0 {
		return false
	}
	for k, v := range am {
		if bm[k] != v {
			return false
		}
	}
	return true
}
