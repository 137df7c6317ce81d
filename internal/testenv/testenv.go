// Package testenv gives each integration test a world of its own on real
// services: a PostgreSQL schema, NATS subjects and streams, RabbitMQ
// exchanges, Kafka topics. Services are found through QUEUEBOX_TEST_*
// variables with the local default port as fallback. When a service is
// missing, the test skips with one line, unless QUEUEBOX_REQUIRE_SERVICES=1
// (set by CI), where it fails.
//
// It also holds the harness of the tests that run the built binary
// (queuebox.go): BuildQueueboxOnce/BuildQueuebox, Start and Process,
// Scrape and Metric.
package testenv

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// Required reports whether missing services fail the run instead of
// skipping it.
func Required() bool { return os.Getenv("QUEUEBOX_REQUIRE_SERVICES") == "1" }

// Unavailable skips t (or fails it when services are required) because
// service could not be reached.
func Unavailable(t testing.TB, service string, err error) {
	t.Helper()
	if Required() {
		t.Fatalf("%s is required (QUEUEBOX_REQUIRE_SERVICES=1) but unreachable: %v", service, err)
	}
	t.Skipf("skipping: %s unreachable (%v); set QUEUEBOX_REQUIRE_SERVICES=1 to fail instead", service, err)
}

// Env returns the environment variable name, or def when it is unset.
func Env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Context returns a context that ends with the test or after d.
func Context(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Eventually polls cond every 10ms until it returns true or d passes, then
// fails t with msg.
func Eventually(t testing.TB, d time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v: "+msg, append([]any{d}, args...)...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// LogBuffer collects what a logger writes, safely for concurrent writers
// and readers: slog.New(slog.NewTextHandler(buf, nil)), then buf.String().
type LogBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
