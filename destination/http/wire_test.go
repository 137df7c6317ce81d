package httpdest_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/destination/cloudevents"
	"github.com/queuebox/queuebox/destination/destinationtest"
	httpdest "github.com/queuebox/queuebox/destination/http"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
)

// newSecret returns a fresh whsec_ secret of 32 random bytes.
func newSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return httpdest.SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// delivery is one request as a receiver got it.
type delivery struct {
	header http.Header
	body   []byte
}

// collector answers 204 to every request and keeps it.
type collector struct {
	mu  sync.Mutex
	got []delivery
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.got = append(c.got, delivery{header: r.Header.Clone(), body: body})
	c.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (c *collector) deliveries() []delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]delivery(nil), c.got...)
}

// publishAll publishes msgs to d and fails the test on any failure.
func publishAll(t *testing.T, d destination.Destination, msgs []outbox.Message) {
	t.Helper()
	if err := d.Publish(testenv.Context(t, 10*time.Second), msgs); err != nil {
		t.Fatalf("Publish: %v", err)
	}
}

// signedMessages are rows of every shape: keyed, retried, a row that
// forges the signature headers, a large body.
func signedMessages() []outbox.Message {
	msgs := make([]outbox.Message, 6)
	for i := range msgs {
		msgs[i] = outbox.Message{ID: destinationtest.NewID(), Topic: "order.created", Payload: fmt.Appendf(nil, `{"n":%d}`, i),
			Headers: map[string]string{}, CreatedAt: time.Now()}
	}
	msgs[1].Key, msgs[1].Attempt = "customer-7", 3
	msgs[2].Headers = map[string]string{"webhook-id": "forged", "Webhook-Signature": "v1,Zm9yZ2Vk", "webhook-timestamp": "1"}
	msgs[3].Payload = bytes.Repeat([]byte(`{"k":"v"},`), 2000)
	msgs[3].Payload = append(append([]byte(`[`), msgs[3].Payload[:len(msgs[3].Payload)-1]...), ']')
	return msgs
}

// writeKey writes an ed25519 private key as PEM (PKCS #8) and returns the
// file and the public key.
func writeKey(t *testing.T) (string, ed25519.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "signing.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, pub
}

// verifyV1a checks the v1a entry of a delivery with the public key. The
// Standard Webhooks Go library verifies v1 (symmetric) signatures only,
// so the asymmetric one is checked with crypto/ed25519 on the content the
// specification signs: id.timestamp.body.
func verifyV1a(t *testing.T, pub ed25519.PublicKey, d delivery) {
	t.Helper()
	content := d.header.Get("webhook-id") + "." + d.header.Get("webhook-timestamp") + "." + string(d.body)
	for _, entry := range strings.Fields(d.header.Get("webhook-signature")) {
		if sig, ok := strings.CutPrefix(entry, "v1a,"); ok {
			raw, err := base64.StdEncoding.DecodeString(sig)
			if err != nil || !ed25519.Verify(pub, []byte(content), raw) {
				t.Errorf("delivery %s: v1a signature does not verify", d.header.Get("webhook-id"))
			}
			return
		}
	}
	t.Errorf("delivery %s: no v1a signature in %q", d.header.Get("webhook-id"), d.header.Get("webhook-signature"))
}

// TestSigningVerifiedByStandardWebhooks: every delivery verifies under
// every configured secret with the Standard Webhooks Go library (a
// rotation: the old and the new secret), and not under a secret that was
// not configured; webhook-id is the row id whatever the row's headers say;
// the v1a entry verifies with the public key. In structured CloudEvents
// mode the signature covers the body as sent.
func TestSigningVerifiedByStandardWebhooks(t *testing.T) {
	for _, mode := range []string{"", cloudevents.Structured} {
		t.Run("cloudEvents="+mode, func(t *testing.T) {
			t.Parallel()
			old, current := newSecret(t), newSecret(t)
			keyFile, pub := writeKey(t)
			rec := &collector{}
			srv := httptest.NewServer(rec)
			t.Cleanup(srv.Close)
			o := httpdest.Options{URL: srv.URL + "/hooks", Signing: &httpdest.Signing{Secrets: []string{old, current}, PrivateKeyFile: keyFile}}
			if mode != "" {
				o.CloudEvents = &cloudevents.Options{Mode: mode, Source: "/shop"}
			}
			msgs := signedMessages()
			publishAll(t, newDest(t, o), msgs)
			got := rec.deliveries()
			if len(got) != len(msgs) {
				t.Fatalf("%d deliveries, want %d", len(got), len(msgs))
			}
			ids := map[string]bool{}
			for _, m := range msgs {
				ids[m.ID] = true
			}
			stranger, err := standardwebhooks.NewWebhook(newSecret(t))
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range got {
				if id := d.header.Get("webhook-id"); !ids[id] || id != d.header.Get("X-Message-Id") {
					t.Errorf("webhook-id %q is not the row id %q", id, d.header.Get("X-Message-Id"))
				}
				if n := len(strings.Fields(d.header.Get("webhook-signature"))); n != 3 {
					t.Errorf("webhook-signature %q: %d entries, want 2 v1 and 1 v1a", d.header.Get("webhook-signature"), n)
				}
				for _, secret := range []string{old, current} {
					wh, err := standardwebhooks.NewWebhook(secret)
					if err != nil {
						t.Fatal(err)
					}
					if err := wh.Verify(d.body, d.header); err != nil {
						t.Errorf("delivery %s does not verify under a configured secret: %v", d.header.Get("webhook-id"), err)
					}
				}
				if err := stranger.Verify(d.body, d.header); err == nil {
					t.Errorf("delivery %s verifies under a secret that was never configured", d.header.Get("webhook-id"))
				}
				verifyV1a(t, pub, d)
			}
		})
	}
}

// TestSigningOptionsAndSecrets: bad keys are refused at New, and a
// receiver that echoes a secret does not put it in the error.
func TestSigningOptionsAndSecrets(t *testing.T) {
	for name, s := range map[string]*httpdest.Signing{
		"not base64": {Secrets: []string{"whsec_***"}},
		"empty":      {Secrets: []string{"whsec_"}},
		"no key":     {},
		"no file":    {PrivateKeyFile: filepath.Join(t.TempDir(), "missing.pem")},
	} {
		if _, err := httpdest.New(t.Context(), httpdest.Options{URL: "http://127.0.0.1:1/x", Signing: s}, logger()); err == nil {
			t.Errorf("%s: New accepted signing %+v", name, s)
		}
	}
	secret := newSecret(t)
	err := publishOne(t, httpdest.Options{Signing: &httpdest.Signing{Secrets: []string{secret}}}, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, "bad signature for "+secret+" and "+strings.TrimPrefix(secret, "whsec_"))
	})
	if err == nil || !outbox.IsPermanent(err) {
		t.Fatalf("400: %v, want a permanent failure", err)
	}
	if strings.Contains(err.Error(), strings.TrimPrefix(secret, "whsec_")) {
		t.Errorf("the error holds the signing secret: %v", err)
	}
}

// TestCloudEventsReadBySDK: the CloudEvents SDK's HTTP binding reads each
// delivery as the event of its row, in binary and in structured mode, and
// a row cannot set an attribute the relay sets.
func TestCloudEventsReadBySDK(t *testing.T) {
	for _, mode := range []string{cloudevents.Binary, cloudevents.Structured} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			events := map[string]json.RawMessage{} // id -> the event as JSON
			var readErrs []error
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ev, err := cehttp.NewEventFromHTTPRequest(r)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					readErrs = append(readErrs, err)
					w.WriteHeader(http.StatusBadRequest)
					return
				}
				if err := ev.Validate(); err != nil {
					readErrs = append(readErrs, err)
				}
				b, _ := json.Marshal(ev)
				events[ev.ID()] = b
				w.WriteHeader(http.StatusAccepted)
			}))
			t.Cleanup(srv.Close)
			d := newDest(t, httpdest.Options{URL: srv.URL + "/events",
				CloudEvents: &cloudevents.Options{Mode: mode, Source: "/shop/{{ aggregateType }}", Type: "com.example.{{ topic }}"}})
			created := time.Date(2026, 3, 1, 12, 30, 45, 123456000, time.FixedZone("CET", 3600))
			msgs := []outbox.Message{
				{ID: destinationtest.NewID(), Topic: "order.created", Key: "customer-42", AggregateType: "order", CreatedAt: created,
					Payload: []byte(`{"total":12.5,"items":["a","b"]}`), Headers: map[string]string{"ce-id": "forged", "Ce-Source": "/forged", "ce-type": "forged", "ce-tenant": "forged"}},
				{ID: destinationtest.NewID(), Topic: "order.paid", AggregateType: "order", CreatedAt: created, Payload: []byte(`"just a string"`)},
			}
			publishAll(t, d, msgs)
			mu.Lock()
			defer mu.Unlock()
			for _, err := range readErrs {
				t.Errorf("the SDK could not read a delivery: %v", err)
			}
			for _, m := range msgs {
				raw, ok := events[m.ID]
				if !ok {
					t.Fatalf("no event with id %s (got %d events)", m.ID, len(events))
				}
				if strings.Contains(string(raw), "forged") {
					t.Errorf("event %s holds an attribute a row header set: %s", m.ID, raw)
				}
				destinationtest.CheckCloudEvent(t, raw, m, "/shop/"+m.AggregateType, "com.example."+m.Topic)
			}
		})
	}
}

// tokenServer is an OAuth2 token endpoint (client credentials) that counts
// its token requests and issues tok-1, tok-2, … valid for expiresIn
// seconds; the receiver accepts only the tokens it says are valid.
type tokenServer struct {
	mu        sync.Mutex
	issued    int
	expiresIn int
	valid     map[string]bool
	forms     []string // each request's scope and audience
	refuse    bool     // answer 401 invalid_client
}

func (s *tokenServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, secret, ok := r.BasicAuth()
	if s.refuse || !ok || id != "queuebox" || secret != "s3cr3t-client" || r.PostFormValue("grant_type") != "client_credentials" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":"invalid_client","error_description":"bad credentials s3cr3t-client"}`)
		return
	}
	s.issued++
	s.forms = append(s.forms, r.PostFormValue("scope")+"|"+r.PostFormValue("audience"))
	tok := fmt.Sprintf("tok-%d", s.issued)
	s.valid[tok] = true
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":%d}`, tok, s.expiresIn)
}

func (s *tokenServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.issued
}

// revoke makes every token issued so far invalid at the receiver.
func (s *tokenServer) revoke() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.valid)
}

// receiver accepts a request whose bearer token the token server issued
// and did not revoke, and answers 401 otherwise.
func (s *tokenServer) receiver(w http.ResponseWriter, r *http.Request) {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	s.mu.Lock()
	ok := s.valid[tok]
	s.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func oauthDest(t *testing.T, ts *tokenServer) *httpdest.Destination {
	t.Helper()
	tokenSrv := httptest.NewServer(ts)
	t.Cleanup(tokenSrv.Close)
	recv := httptest.NewServer(http.HandlerFunc(ts.receiver))
	t.Cleanup(recv.Close)
	return newDest(t, httpdest.Options{URL: recv.URL + "/hooks", Concurrency: 4, Auth: &httpdest.Auth{OAuth2: &httpdest.OAuth2{
		TokenURL: tokenSrv.URL + "/token", ClientID: "queuebox", ClientSecret: "s3cr3t-client",
		Scopes: []string{"events.write"}, EndpointParams: map[string]string{"audience": "https://hooks.example"},
	}}})
}

func batch(n int) []outbox.Message {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = msg()
		msgs[i].Headers = map[string]string{"Authorization": "Bearer from-the-row"}
	}
	return msgs
}

// TestOAuth2ClientCredentials: one token serves every request while it is
// valid; a token about to expire is replaced before it is used; a 401
// drops the cached token once and the request is sent again with a new
// one; a token endpoint that refuses the credentials makes the destination
// unavailable, and the client secret appears in no error.
func TestOAuth2ClientCredentials(t *testing.T) {
	t.Run("cached", func(t *testing.T) {
		t.Parallel()
		ts := &tokenServer{expiresIn: 3600, valid: map[string]bool{}}
		d := oauthDest(t, ts)
		publishAll(t, d, batch(20))
		publishAll(t, d, batch(5))
		if n := ts.count(); n != 1 {
			t.Errorf("%d token requests for 25 deliveries with a token valid an hour, want 1", n)
		}
		if got := ts.forms[0]; got != "events.write|https://hooks.example" {
			t.Errorf("token request scope|audience = %q", got)
		}
	})
	t.Run("refreshed before expiry", func(t *testing.T) {
		t.Parallel()
		// A token that expires within the refresh margin is replaced at
		// its next use.
		ts := &tokenServer{expiresIn: 5, valid: map[string]bool{}}
		d := oauthDest(t, ts)
		for range 3 {
			publishAll(t, d, batch(1))
		}
		if n := ts.count(); n != 3 {
			t.Errorf("%d token requests for 3 deliveries with tokens about to expire, want 3", n)
		}
	})
	t.Run("401 drops the token once", func(t *testing.T) {
		t.Parallel()
		ts := &tokenServer{expiresIn: 3600, valid: map[string]bool{}}
		d := oauthDest(t, ts)
		publishAll(t, d, batch(1))
		ts.revoke()
		publishAll(t, d, batch(8)) // each refused once, then sent with tok-2
		if n := ts.count(); n != 2 {
			t.Errorf("%d token requests, want 2: one more after the receiver refused the first token", n)
		}
	})
	t.Run("refused again", func(t *testing.T) {
		t.Parallel()
		ts := &tokenServer{expiresIn: 3600, valid: map[string]bool{}}
		recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, "refused "+r.Header.Get("Authorization"))
		}))
		t.Cleanup(recv.Close)
		tokenSrv := httptest.NewServer(ts)
		t.Cleanup(tokenSrv.Close)
		d := newDest(t, httpdest.Options{URL: recv.URL, Auth: &httpdest.Auth{OAuth2: &httpdest.OAuth2{
			TokenURL: tokenSrv.URL, ClientID: "queuebox", ClientSecret: "s3cr3t-client"}}})
		err := destination.ErrorAt(d.Publish(testenv.Context(t, 10*time.Second), batch(1)), 0)
		if !outbox.IsUnavailable(err) {
			t.Errorf("401 with a fresh token: %v, want unavailable", err)
		}
		if n := ts.count(); n != 2 {
			t.Errorf("%d token requests, want 2 (one retry, not a loop)", n)
		}
		if strings.Contains(err.Error(), "tok-") {
			t.Errorf("the error holds the access token: %v", err)
		}
	})
	t.Run("token endpoint refuses", func(t *testing.T) {
		t.Parallel()
		ts := &tokenServer{refuse: true, valid: map[string]bool{}}
		d := oauthDest(t, ts)
		err := destination.ErrorAt(d.Publish(testenv.Context(t, 10*time.Second), batch(1)), 0)
		if !outbox.IsUnavailable(err) || !strings.Contains(err.Error(), "invalid_client") {
			t.Errorf("token endpoint 401: %v, want unavailable naming invalid_client", err)
		}
		if strings.Contains(err.Error(), "s3cr3t-client") {
			t.Errorf("the error holds the client secret: %v", err)
		}
	})
}
