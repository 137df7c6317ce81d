package ingest_test

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/inbox/ingest"
	"github.com/queuebox/queuebox/inbox/intake"
	"github.com/queuebox/queuebox/internal/testenv"
)

const (
	swSecret     = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	githubSecret = "It's a Secret to Everybody"
	stripeSecret = "whsec_stripe_test_secret"
	bearerToken  = "tok-3f9a1c"
	apiKey       = "key-77d2"
)

func field(t *testing.T, header, path string) intake.Field {
	t.Helper()
	f, err := intake.NewField(header, path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func topic(t *testing.T, s string) *intake.Topic {
	t.Helper()
	tp, err := intake.ParseTopic(s)
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

// world is an ingest server over a fresh inbox table.
type world struct {
	pg  *testenv.PG
	srv *httptest.Server
}

func newWorld(t *testing.T, sources ...ingest.Source) *world {
	t.Helper()
	pg := testenv.InboxPostgres(t)
	table, err := inbox.NewTable(pg.Pool, inbox.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	table.Batch(2) // as queuebox run
	t.Cleanup(table.Close)
	h, err := ingest.New(table, sources, ingest.Options{MaxBodyBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &world{pg: pg, srv: srv}
}

type answer struct {
	code   int
	Status string `json:"status"`
	ID     string `json:"id"`
	Reason string `json:"reason"`
	header http.Header
}

func (w *world) post(t *testing.T, source string, body []byte, h http.Header) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, w.srv.URL+"/inbox/"+source, strings.NewReader(string(body)))
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := w.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{code: resp.StatusCode, header: resp.Header}
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("answer %d %q is not JSON: %v", resp.StatusCode, b, err)
	}
	return a
}

func (w *world) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := w.pg.Pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func hmacHex(key, msg string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

// signer signs one request for a scheme, as that scheme's senders do.
type signer func(t *testing.T, id string, body []byte, at time.Time) http.Header

func standardWebhooksSigner(t *testing.T, id string, body []byte, at time.Time) http.Header {
	wh, err := standardwebhooks.NewWebhook(swSecret)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := wh.Sign(id, at, body)
	if err != nil {
		t.Fatal(err)
	}
	return http.Header{"Webhook-Id": {id}, "Webhook-Timestamp": {strconv.FormatInt(at.Unix(), 10)}, "Webhook-Signature": {sig}}
}

func githubSigner(_ *testing.T, id string, body []byte, _ time.Time) http.Header {
	return http.Header{"X-Github-Delivery": {id}, "X-Github-Event": {"push"}, "X-Hub-Signature-256": {"sha256=" + hmacHex(githubSecret, string(body))}}
}

func stripeSigner(_ *testing.T, _ string, body []byte, at time.Time) http.Header {
	ts := strconv.FormatInt(at.Unix(), 10)
	return http.Header{"Stripe-Signature": {"t=" + ts + ",v1=" + hmacHex(stripeSecret, ts+"."+string(body)) + ",v0=00"}}
}

func bearerSigner(_ *testing.T, id string, _ []byte, _ time.Time) http.Header {
	return http.Header{"Authorization": {"Bearer " + bearerToken}, "Idempotency-Key": {id}}
}

func apiKeySigner(_ *testing.T, id string, _ []byte, _ time.Time) http.Header {
	return http.Header{"X-Api-Key": {apiKey}, "Idempotency-Key": {id}}
}

func schemeSources(t *testing.T) []ingest.Source {
	idem := field(t, "Idempotency-Key", "")
	return []ingest.Source{
		{Name: "sw", Auth: ingest.Auth{Scheme: ingest.SchemeStandardWebhooks, Secrets: []string{"whsec_" + base64.StdEncoding.EncodeToString([]byte("old")), swSecret}},
			Rules: intake.Rules{Source: "sw", IdempotencyKey: field(t, "webhook-id", ""), OrderKey: field(t, "", "customer"), Topic: topic(t, "sw.{{ payload.type }}")}},
		{Name: "github", Auth: ingest.Auth{Scheme: ingest.SchemeGitHub, Secrets: []string{githubSecret}},
			Rules: intake.Rules{Source: "github", IdempotencyKey: field(t, "X-GitHub-Delivery", ""), Topic: topic(t, "github.{{ header.X-GitHub-Event }}")}},
		{Name: "stripe", Auth: ingest.Auth{Scheme: ingest.SchemeStripe, Secrets: []string{stripeSecret}},
			Rules: intake.Rules{Source: "stripe", IdempotencyKey: field(t, "", "id"), Topic: topic(t, "stripe.{{ payload.type }}")}},
		{Name: "bearer", Auth: ingest.Auth{Scheme: ingest.SchemeBearer, Secrets: []string{bearerToken}}, Pull: true,
			Rules: intake.Rules{Source: "bearer", IdempotencyKey: idem, Headers: intake.NewHeaderPolicy()}},
		{Name: "apikey", Auth: ingest.Auth{Scheme: ingest.SchemeAPIKey, Secrets: []string{apiKey}},
			Rules: intake.Rules{Source: "apikey", IdempotencyKey: idem, Headers: intake.NewHeaderPolicy("X-Api-Key")}},
	}
}

// TestSignedSenders sends one signed message per scheme twice (202, then
// 200 duplicate with the same id), and the same message with a wrong
// signature and, where the scheme signs a time, an expired one (401).
func TestSignedSenders(t *testing.T) {
	w := newWorld(t, schemeSources(t)...)
	now := time.Now()
	for _, c := range []struct {
		source, topic string
		sign          signer
		pull          bool
	}{
		{"sw", "sw.order.paid", standardWebhooksSigner, false},
		{"github", "github.push", githubSigner, false},
		{"stripe", "stripe.order.paid", stripeSigner, false},
		{"bearer", "bearer", bearerSigner, true},
		{"apikey", "apikey", apiKeySigner, false},
	} {
		t.Run(c.source, func(t *testing.T) {
			id := "evt_" + c.source + "_1"
			body := []byte(fmt.Sprintf(`{"id":%q,"type":"order.paid","customer":"c-7"}`, id))
			first := w.post(t, c.source, body, c.sign(t, id, body, now))
			if first.code != http.StatusAccepted || first.Status != "accepted" || first.ID == "" {
				t.Fatalf("first delivery: %d %+v", first.code, first)
			}
			again := w.post(t, c.source, body, c.sign(t, id, body, now.Add(time.Second)))
			if again.code != http.StatusOK || again.Status != "duplicate" || again.ID != first.ID {
				t.Fatalf("repeat: %d %+v, want 200 duplicate %s", again.code, again, first.ID)
			}
			tampered := append([]byte(nil), body...)
			tampered[len(tampered)-3] = 'X'
			if a := w.post(t, c.source, tampered, c.sign(t, id, body, now)); a.code != http.StatusUnauthorized && c.source != "bearer" && c.source != "apikey" {
				t.Errorf("tampered body: %d %+v, want 401", a.code, a)
			}
			if c.source == "sw" || c.source == "stripe" {
				if a := w.post(t, c.source, body, c.sign(t, id, body, now.Add(-10*time.Minute))); a.code != http.StatusUnauthorized {
					t.Errorf("signature from 10 minutes ago: %d %+v, want 401", a.code, a)
				}
			}
			if got := w.count(t, `SELECT count(*) FROM inbox WHERE source = $1 AND idempotency_key = $2 AND topic = $3 AND id = $4`, c.source, id, c.topic, first.ID); got != 1 {
				t.Errorf("inbox rows of %s with topic %s and id %s: %d, want 1", id, c.topic, first.ID, got)
			}
			wantOutbox, state := 1, "sent"
			if c.pull {
				wantOutbox, state = 0, "pending"
			}
			if got := w.count(t, `SELECT count(*) FROM outbox WHERE id = $1`, first.ID); got != wantOutbox {
				t.Errorf("outbox rows with id %s: %d, want %d", first.ID, got, wantOutbox)
			}
			if got := w.count(t, `SELECT count(*) FROM inbox WHERE id = $1 AND state = $2`, first.ID, state); got != 1 {
				t.Errorf("inbox row not %s", state)
			}
		})
	}
	if got := w.count(t, `SELECT count(*) FROM outbox WHERE key = 'c-7' AND topic = 'sw.order.paid'`); got != 1 {
		t.Errorf("the order key did not reach the outbox row: %d", got)
	}
}

func bearer(id string) http.Header {
	return http.Header{"Authorization": {"Bearer " + bearerToken}, "Idempotency-Key": {id}}
}

// TestRejections checks each refusal and its reason: 400, 401, 404, 405,
// 413, 422 and 429 with Retry-After; none stores a row.
func TestRejections(t *testing.T) {
	auth := ingest.Auth{Scheme: ingest.SchemeBearer, Secrets: []string{bearerToken}}
	w := newWorld(t,
		ingest.Source{Name: "plain", Auth: auth, Rules: intake.Rules{Source: "plain", IdempotencyKey: field(t, "Idempotency-Key", ""), OrderKey: field(t, "", "order.id")}},
		ingest.Source{Name: "bypath", Auth: auth, Rules: intake.Rules{Source: "bypath", IdempotencyKey: field(t, "", "event.id")}},
		ingest.Source{Name: "slow", Auth: auth, RatePerSec: 0.5, Burst: 1, Rules: intake.Rules{Source: "slow", IdempotencyKey: field(t, "Idempotency-Key", "")}},
	)
	for _, c := range []struct {
		name, source string
		body         string
		h            http.Header
		code         int
		reason       string
	}{
		{"no credentials", "plain", `{}`, http.Header{"Idempotency-Key": {"a"}}, 401, "Bearer"},
		{"wrong token", "plain", `{}`, http.Header{"Authorization": {"Bearer nope"}, "Idempotency-Key": {"a"}}, 401, "wrong credentials"},
		{"not JSON", "plain", `id=1`, bearer("a"), 400, "not JSON"},
		{"no idempotency header", "plain", `{}`, bearer(""), 400, "Idempotency-Key"},
		{"path missing", "bypath", `{"event":{}}`, bearer(""), 422, "event.id"},
		{"path not a scalar", "bypath", `{"event":{"id":{"x":1}}}`, bearer(""), 422, "not a string"},
		{"order key not a scalar", "plain", `{"order":{"id":[1]}}`, bearer("b"), 422, "order key"},
		{"key too long", "plain", `{}`, bearer(strings.Repeat("k", 256)), 422, "longer than 255"},
		{"body too large", "plain", `{"pad":"` + strings.Repeat("x", 5000) + `"}`, bearer("c"), 413, "larger than 4096"},
		{"NUL in a string", "plain", `{"a":"\u0000"}`, bearer("d"), 422, "refused by the database"},
		{"no such source", "nope", `{}`, bearer("e"), 404, `no source "nope"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := w.post(t, c.source, []byte(c.body), c.h)
			if a.code != c.code || a.Status != "rejected" || !strings.Contains(a.Reason, c.reason) {
				t.Errorf("%d %+v, want %d with a reason naming %q", a.code, a, c.code, c.reason)
			}
		})
	}
	if got := w.count(t, `SELECT count(*) FROM inbox`); got != 0 {
		t.Errorf("%d rows stored by rejected requests", got)
	}
	resp, err := http.Get(w.srv.URL + "/inbox/plain")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d, want 405", resp.StatusCode)
	}
	if a := w.post(t, "slow", []byte(`{}`), bearer("s1")); a.code != http.StatusAccepted {
		t.Fatalf("first request under the rate limit: %d %+v", a.code, a)
	}
	a := w.post(t, "slow", []byte(`{}`), bearer("s2"))
	if a.code != http.StatusTooManyRequests || a.header.Get("Retry-After") != "2" {
		t.Errorf("second request at 0.5/s: %d, Retry-After %q; want 429 with Retry-After 2", a.code, a.header.Get("Retry-After"))
	}
}

// TestHeaderPolicy stores a sender's headers, but none that queuebox sets
// on delivery, no credential and no hop-by-hop header.
func TestHeaderPolicy(t *testing.T) {
	w := newWorld(t, ingest.Source{Name: "hooks", Auth: ingest.Auth{Scheme: ingest.SchemeAPIKey, Secrets: []string{apiKey}, Header: "X-Api-Key"},
		Rules: intake.Rules{Source: "hooks", IdempotencyKey: field(t, "Idempotency-Key", ""), Headers: intake.NewHeaderPolicy("X-Api-Key")}})
	h := http.Header{"X-Api-Key": {apiKey}, "Idempotency-Key": {"h1"}, "X-Request-Id": {"r-1"}, "Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		"X-Message-Id": {"forged"}, "Nats-Msg-Id": {"forged"}, "Nats-Expected-Stream": {"x"}, "X-Attempt": {"9"}, "X-Topic": {"admin"},
		"Authorization": {"Basic c2VjcmV0"}, "Cookie": {"s=1"}, "Connection": {"close"}}
	a := w.post(t, "hooks", []byte(`{}`), h)
	if a.code != http.StatusAccepted {
		t.Fatalf("%d %+v", a.code, a)
	}
	var stored map[string]string
	if err := w.pg.Pool.QueryRow(context.Background(), `SELECT headers FROM outbox WHERE id = $1`, a.ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	for _, keep := range []string{"X-Request-Id", "Traceparent"} {
		if stored[keep] == "" {
			t.Errorf("header %s not stored: %v", keep, stored)
		}
	}
	for name := range stored {
		switch strings.ToLower(name) {
		case "x-request-id", "traceparent", "user-agent", "accept-encoding":
		default:
			t.Errorf("stored header %s = %q", name, stored[name])
		}
	}
}

// TestConcurrentRepeats sends each of 20 keys 8 times at once: the batched
// statements store each key once, and every answer carries its id.
func TestConcurrentRepeats(t *testing.T) {
	w := newWorld(t, ingest.Source{Name: "hooks", Auth: ingest.Auth{Scheme: ingest.SchemeBearer, Secrets: []string{bearerToken}},
		Rules: intake.Rules{Source: "hooks", IdempotencyKey: field(t, "Idempotency-Key", "")}})
	type result struct{ key, id, status string }
	results := make(chan result, 160)
	for k := range 20 {
		for range 8 {
			go func() {
				key := fmt.Sprintf("k%d", k)
				a := w.post(t, "hooks", []byte(`{"k":"`+key+`"}`), bearer(key))
				results <- result{key, a.ID, a.Status}
			}()
		}
	}
	ids, accepted := map[string]string{}, map[string]int{}
	for range 160 {
		r := <-results
		if r.status == "accepted" {
			accepted[r.key]++
		}
		if prev, ok := ids[r.key]; ok && prev != r.id {
			t.Errorf("key %s answered with ids %s and %s", r.key, prev, r.id)
		}
		ids[r.key] = r.id
	}
	for k := range 20 {
		if key := fmt.Sprintf("k%d", k); accepted[key] != 1 {
			t.Errorf("key %s accepted %d times, want 1", key, accepted[key])
		}
	}
	if got := w.count(t, `SELECT count(*) FROM inbox`); got != 20 {
		t.Errorf("%d inbox rows, want 20", got)
	}
	if got := w.count(t, `SELECT count(*) FROM outbox`); got != 20 {
		t.Errorf("%d outbox rows, want 20", got)
	}
}

// TestDatabaseDown answers 503 with Retry-After while the database cannot
// be reached: nothing was stored, and the sender should try again.
func TestDatabaseDown(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@"+testenv.ClosedPort(t)+"/postgres?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	table, err := inbox.NewTable(pool, inbox.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := ingest.New(table, []ingest.Source{{Name: "plain", Auth: ingest.Auth{Scheme: ingest.SchemeBearer, Secrets: []string{bearerToken}},
		Rules: intake.Rules{Source: "plain", IdempotencyKey: field(t, "Idempotency-Key", "")}}}, ingest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	a := (&world{srv: srv}).post(t, "plain", []byte(`{}`), bearer("k"))
	if a.code != http.StatusServiceUnavailable || a.header.Get("Retry-After") != "1" || !strings.Contains(a.Reason, "retry later") {
		t.Errorf("%d %+v Retry-After %q; want 503 with Retry-After 1", a.code, a, a.header.Get("Retry-After"))
	}
}

// TestStandardWebhooksV1a verifies an ed25519 (v1a) signature against a
// whpk_ public key, beside a symmetric secret.
func TestStandardWebhooksV1a(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, ingest.Source{Name: "sw", Auth: ingest.Auth{Scheme: ingest.SchemeStandardWebhooks,
		Secrets: []string{swSecret, "whpk_" + base64.StdEncoding.EncodeToString(pub)}},
		Rules: intake.Rules{Source: "sw", IdempotencyKey: field(t, "webhook-id", "")}})
	body := []byte(`{"type":"x"}`)
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	sig := base64.StdEncoding.EncodeToString(ed25519.Sign(priv, []byte("msg_1."+ts+"."+string(body))))
	h := http.Header{"Webhook-Id": {"msg_1"}, "Webhook-Timestamp": {ts}, "Webhook-Signature": {"v1,bm90LWl0 v1a," + sig}}
	if a := w.post(t, "sw", body, h); a.code != http.StatusAccepted {
		t.Fatalf("v1a: %d %+v", a.code, a)
	}
	h.Set("Webhook-Signature", "v1a,"+base64.StdEncoding.EncodeToString(ed25519.Sign(priv, []byte("other"))))
	if a := w.post(t, "sw", body, h); a.code != http.StatusUnauthorized {
		t.Fatalf("a v1a signature of other content: %d %+v", a.code, a)
	}
}
