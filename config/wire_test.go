package config

import (
	"slices"
	"strings"
	"testing"
)

// TestWireSecretsRedacted: signing secrets (whole and their key) and the
// OAuth2 client secret are secrets: listed by Secrets, never printed.
func TestWireSecretsRedacted(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(`
database: {url: postgres://queuebox@127.0.0.1:5432/queuebox}
destinations:
  hooks:
    type: http
    url: https://hooks.example.com/in
    signing: {secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]}
    auth: {oauth2: {tokenURL: https://login.example.com/token, clientID: queuebox, clientSecret: s3cr3t-client-value, scopes: [a]}}
    cloudEvents: {mode: structured}
routes: [{topicPattern: "**", destination: hooks}]
`), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	secrets := cfg.Secrets()
	for _, s := range []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "s3cr3t-client-value"} {
		if !slices.Contains(secrets, s) {
			t.Errorf("Secrets() lacks %q", s)
		}
	}
	text := cfg.String()
	for _, s := range []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "s3cr3t-client-value"} {
		if strings.Contains(text, s) {
			t.Errorf("String() shows the secret %q:\n%s", s, text)
		}
	}
	if cfg.Destinations["hooks"].Signing.Secrets[0] != "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" {
		t.Errorf("Redacted changed the configuration itself")
	}
	ce := cfg.Destinations["hooks"].CloudEvents
	if ce.Source != "/queuebox/hooks" || ce.Type != "{{ topic }}" {
		t.Errorf("cloudEvents defaults: source %q, type %q", ce.Source, ce.Type)
	}
}
