package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testenv"
)

func TestOrderService(t *testing.T) {
	pg := testenv.Postgres(t, testenv.WithoutMigrations()) // run applies them
	ctx := testenv.Context(t, 30*time.Second)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, pg.URL, "", ln, slog.New(slog.DiscardHandler)) }()
	base := "http://" + ln.Addr().String()

	post := func(body string) (int, map[string]string) {
		t.Helper()
		var (
			code int
			b    []byte
		)
		// The server is serving once setup is done; wait for it.
		testenv.Eventually(t, 10*time.Second, func() bool {
			req, _ := http.NewRequestWithContext(ctx, "POST", base+"/orders", strings.NewReader(body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			code = resp.StatusCode
			b, _ = io.ReadAll(resp.Body)
			return true
		}, "orderservice never answered")
		var out map[string]string
		_ = json.Unmarshal(b, &out)
		return code, out
	}

	code, out := post(`{"customer":"ada","totalCents":4200}`)
	if code != http.StatusCreated || out["orderId"] == "" || out["eventId"] == "" {
		t.Fatalf("POST /orders: %d %v", code, out)
	}
	if code, _ := post(`{"customer":"","totalCents":1}`); code != http.StatusBadRequest {
		t.Errorf("invalid order: %d", code)
	}

	var customer, topic, key, payloadOrder, state string
	err = pg.Pool.QueryRow(ctx, `SELECT o.customer, x.topic, x.key, x.payload->>'orderId', x.state
		FROM orders o JOIN outbox x ON x.key = o.id::text WHERE x.id = $1`, out["eventId"]).
		Scan(&customer, &topic, &key, &payloadOrder, &state)
	if err != nil {
		t.Fatal(err)
	}
	if customer != "ada" || topic != "order.created" || key != out["orderId"] || payloadOrder != out["orderId"] || state != "pending" {
		t.Errorf("order %s / event: %s %s %s %s %s", out["orderId"], customer, topic, key, payloadOrder, state)
	}
	var orders, events int
	if err := pg.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM outbox)`).Scan(&orders, &events); err != nil {
		t.Fatal(err)
	}
	if orders != 1 || events != 1 {
		t.Errorf("%d orders, %d events; want 1 and 1", orders, events)
	}

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}
