package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/config"
	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/inbox/ingest"
	"github.com/queuebox/queuebox/inbox/intake"
	"github.com/queuebox/queuebox/internal/testenv"
)

// TestInboxService signs GitHub push deliveries as GitHub does, posts them
// (one twice) to an ingest server built from queuebox.yaml's github source,
// and runs the service: each push is counted once, and each repository's
// head is its last push.
func TestInboxService(t *testing.T) {
	pg := testenv.InboxPostgres(t)
	t.Setenv("DATABASE_URL", pg.URL)
	t.Setenv("GITHUB_WEBHOOK_SECRET", "s3cret")
	t.Setenv("STRIPE_WEBHOOK_SECRET", "whsec_x")
	cfg, err := config.Load("queuebox.yaml")
	if err != nil {
		t.Fatal(err)
	}
	gh := cfg.Inbox.Sources["github"]
	ctx := testenv.Context(t, time.Minute)
	table, err := inbox.NewTable(pg.Pool, inbox.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The source as queuebox run builds it from the example's configuration.
	idem, _ := intake.NewField(gh.IdempotencyKey.Header, gh.IdempotencyKey.JSONPath)
	order, _ := intake.NewField(gh.OrderKey.Header, gh.OrderKey.JSONPath)
	topic, _ := intake.ParseTopic(gh.Topic)
	h, err := ingest.New(table, []ingest.Source{{Name: "github", Pull: gh.Handoff == "pull", Auth: ingest.Auth{Scheme: gh.Auth.Scheme, Secrets: gh.Auth.Secrets},
		Rules: intake.Rules{Source: "github", IdempotencyKey: idem, OrderKey: order, Topic: topic, Headers: intake.NewHeaderPolicy()}}}, ingest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	deliver := func(delivery, repo, after string, commits int) int {
		body := fmt.Sprintf(`{"after":%q,"commits":[%s],"repository":{"full_name":%q}}`, after, strings.TrimSuffix(strings.Repeat(`{},`, commits), ","), repo)
		mac := hmac.New(sha256.New, []byte("s3cret"))
		mac.Write([]byte(body))
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/inbox/github", strings.NewReader(body))
		req.Header.Set("X-GitHub-Delivery", delivery)
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 12 {
		repo := fmt.Sprintf("acme/repo-%d", i%3)
		if code := deliver(fmt.Sprintf("d-%d", i), repo, fmt.Sprintf("sha-%d", i), 2); code != http.StatusAccepted {
			t.Fatalf("delivery %d: %d", i, code)
		}
	}
	if code := deliver("d-4", "acme/repo-1", "sha-4", 2); code != http.StatusOK {
		t.Fatalf("redelivery: %d, want 200", code)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Run(rctx, pg.Pool, nil) }()
	testenv.Eventually(t, 20*time.Second, func() bool {
		var n int
		_ = pg.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE state = 'sent'`).Scan(&n)
		return n == 12
	}, "the service did not apply the pushes")
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rows, err := pg.Pool.Query(ctx, `SELECT repo, pushes, commits, head FROM repo_pushes ORDER BY repo`)
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	for rows.Next() {
		var repo, head string
		var pushes, commits int
		if err := rows.Scan(&repo, &pushes, &commits, &head); err != nil {
			t.Fatal(err)
		}
		if pushes != 4 || commits != 8 || head != fmt.Sprintf("sha-%d", 9+i) {
			t.Errorf("%s: %d pushes, %d commits, head %s; want 4, 8, sha-%d", repo, pushes, commits, head, 9+i)
		}
		i++
	}
	if i != 3 {
		t.Errorf("%d repositories, want 3", i)
	}
}
