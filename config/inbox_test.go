package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestInboxConfig reads an inbox of every source type: the defaults each
// scheme implies, the secrets listed for redaction and masked in String.
func TestInboxConfig(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(`
database: {url: "postgres://u:dbpw@127.0.0.1:5432/db"}
destinations: {hooks: {type: http, url: "http://127.0.0.1:8080/h"}}
routes: [{topicPattern: "**", destination: hooks}]
inbox:
  listen: 0.0.0.0:8081
  sources:
    sw: {type: http, auth: {scheme: standardWebhooks, secrets: [whsec_c2VjcmV0]}}
    github: {type: http, auth: {scheme: github, secrets: [gh-secret-1]}, handoff: pull}
    stripe: {type: http, auth: {scheme: stripe, secrets: [whsec_stripe1]}, topic: "stripe.{{ payload.type }}"}
    partner: {type: http, auth: {scheme: apiKey, secrets: [key-123456]}, idempotencyKey: {jsonPath: event.id}}
    js: {type: nats, servers: ["nats://u:natspw@127.0.0.1:4222"], stream: ORDERS, consumer: inbox}
    kafka: {type: kafka, brokers: ["127.0.0.1:9092"], topics: [orders], group: inbox}
    rabbit: {type: amqp, url: "amqp://guest:amqppw@127.0.0.1:5672/", queue: in}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	in := cfg.Inbox
	if in.Table != "inbox" || in.MaxBodyBytes != 1<<20 || in.MaxConns != 16 {
		t.Errorf("defaults: table %q maxBodyBytes %d maxConns %d", in.Table, in.MaxBodyBytes, in.MaxConns)
	}
	for name, want := range map[string]string{"sw": "header webhook-id", "github": "header X-GitHub-Delivery", "stripe": "jsonPath id", "partner": "jsonPath event.id"} {
		f := in.Sources[name].IdempotencyKey
		got := "none"
		if f != nil && f.Header != "" {
			got = "header " + f.Header
		} else if f != nil {
			got = "jsonPath " + f.JSONPath
		}
		if got != want {
			t.Errorf("%s: idempotency key %s, want %s", name, got, want)
		}
	}
	if s := in.Sources["sw"]; s.Handoff != "push" || s.Topic != "{{ topic }}" || s.MaxAttempts != 5 || s.Auth.Tolerance.D() != 5*time.Minute {
		t.Errorf("sw defaults: %+v %+v", s, s.Auth)
	}
	if in.Sources["partner"].Auth.Header != "X-Api-Key" || in.Sources["rabbit"].Prefetch != 64 {
		t.Error("apiKey header or amqp prefetch default not applied")
	}
	secrets := strings.Join(cfg.Secrets(), " ")
	out := cfg.String()
	for _, s := range []string{"whsec_c2VjcmV0", "gh-secret-1", "whsec_stripe1", "key-123456", "natspw", "amqppw"} {
		if !strings.Contains(secrets, s) {
			t.Errorf("Secrets lacks %s", s)
		}
		if strings.Contains(out, s) {
			t.Errorf("String shows %s", s)
		}
	}
	if cfg.Inbox.Sources["github"].Auth.Secrets[0] != "gh-secret-1" {
		t.Error("Redacted changed the configuration it copied")
	}
}

// TestExampleInbox uncomments the inbox section of config.example.yaml and
// loads the whole: every key it names is one the configuration knows.
func TestExampleInbox(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "config.example.yaml"))
	if err != nil {
		t.Skip(err)
	}
	text := string(data)
	i := strings.Index(text, "# inbox:")
	if i < 0 {
		t.Fatal("config.example.yaml has no commented inbox section")
	}
	var b strings.Builder
	for _, line := range strings.Split(text[i:], "\n") {
		if rest, ok := strings.CutPrefix(line, "# "); ok && !strings.HasPrefix(strings.TrimSpace(rest), "#") {
			b.WriteString(rest + "\n")
		}
	}
	env := func(k string) (string, bool) {
		if k == "GITHUB_WEBHOOK_SECRET" {
			return "gh", true
		}
		return testEnv(k)
	}
	cfg, err := Parse([]byte(text[:i]+b.String()), env)
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if len(cfg.Inbox.Sources) != 4 || cfg.Inbox.Sources["github"].RateLimit == nil {
		t.Errorf("inbox sources: %+v", cfg.Inbox.Sources)
	}
}
