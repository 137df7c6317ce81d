package router

import (
	"errors"
	"strings"
	"testing"

	"github.com/queuebox/queuebox/outbox"
)

func TestRouterFirstMatchWins(t *testing.T) {
	t.Parallel()
	r, err := New([]RouteSpec{
		{Pattern: "order.created", Destination: "special"},
		{Pattern: "order.**", Destination: "events"},
		{Pattern: "invoice.*", Destination: "ledger"},
		{Pattern: "**", Destination: "hooks"},
		{Pattern: "order.updated", Destination: "never"},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]string{
		"order.created":     "special",
		"order.updated":     "events",
		"order.eu.created":  "events",
		"invoice.paid":      "ledger",
		"invoice.paid.late": "hooks",
		"order":             "hooks",
	}
	for topic, want := range tests {
		rt, ok := r.Match(topic)
		if !ok || rt.Destination != want {
			t.Errorf("Match(%q) = %q, %v; want %q", topic, rt.Destination, ok, want)
		}
		got, err := r.Route(&outbox.Message{Topic: topic})
		if err != nil || got != want {
			t.Errorf("Route(%q) = %q, %v; want %q", topic, got, err, want)
		}
	}
	if rt, _ := r.Match("order.updated"); rt.Index != 1 {
		t.Errorf("Index = %d, want 1", rt.Index)
	}
}

func TestRouterNoRoute(t *testing.T) {
	t.Parallel()
	r, err := New([]RouteSpec{
		{Pattern: "order.**", Destination: "events"},
		{Pattern: "invoice.*", Destination: "ledger"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Match("x"); ok {
		t.Fatal("Match(x) matched")
	}
	_, err = r.Route(&outbox.Message{Topic: "x"})
	if !errors.Is(err, outbox.ErrNoRoute) {
		t.Fatalf("Route error %v does not wrap outbox.ErrNoRoute", err)
	}
	want := `no route matches topic "x" (routes: order.**, invoice.*)`
	if err.Error() != want || r.NoRouteReason("x") != want {
		t.Errorf("reason = %q, want %q", err.Error(), want)
	}
	if !outbox.IsRetryable(err) {
		// The engine, not the router, decides; the error is only classified by ErrNoRoute.
		t.Log("no-route error is not retryable")
	}
}

func TestNoRouteReasonIsBounded(t *testing.T) {
	t.Parallel()
	var specs []RouteSpec
	for range 25 {
		specs = append(specs, RouteSpec{Pattern: "a.b", Destination: "d"})
	}
	r, err := New(specs)
	if err != nil {
		t.Fatal(err)
	}
	got := r.NoRouteReason("x")
	if !strings.HasSuffix(got, ", … 15 more)") {
		t.Errorf("reason = %q", got)
	}
	empty, _ := New(nil)
	if got := empty.NoRouteReason("x"); got != `no route matches topic "x" (routes: none)` {
		t.Errorf("reason = %q", got)
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	_, err := New([]RouteSpec{{Pattern: "a", Destination: "d"}, {Pattern: "a..b", Destination: "d"}})
	if err == nil || !strings.HasPrefix(err.Error(), "routes[1].topicPattern: ") {
		t.Errorf("err = %v", err)
	}
	_, err = New([]RouteSpec{{Pattern: "a"}})
	if err == nil || err.Error() != "routes[0].destination: required" {
		t.Errorf("err = %v", err)
	}
}
