package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSURL returns the URL of the shared NATS server with JetStream
// (QUEUEBOX_TEST_NATS_URL, default nats://127.0.0.1:4222) after checking
// that it answers and has JetStream enabled. When it does not, t is skipped
// (or failed with QUEUEBOX_REQUIRE_SERVICES=1).
func NATSURL(t testing.TB) string {
	t.Helper()
	url := Env("QUEUEBOX_TEST_NATS_URL", "nats://127.0.0.1:4222")
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second), nats.MaxReconnects(0), nats.Name("queuebox-testenv"))
	if err != nil {
		Unavailable(t, "NATS ("+url+")", err)
		return ""
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if _, err = js.AccountInfo(ctx); err == nil {
			err = keepStreamsDir(ctx, js)
		}
	}
	if err != nil {
		Unavailable(t, "NATS JetStream ("+url+")", err)
		return ""
	}
	return url
}

// keepStreamsDir makes sure the shared server's account keeps one file
// stream that no test deletes. A nats-server (2.9) that deletes an
// account's last file stream removes the account's streams directory,
// and a stream created at that moment by a test running in parallel fails
// with "error creating store for stream" (10049).
func keepStreamsDir(ctx context.Context, js jetstream.JetStream) error {
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: "QUEUEBOX_TESTENV_KEEP", Subjects: []string{"queuebox-testenv.keep"},
		Storage: jetstream.FileStorage, MaxMsgs: 1,
	})
	return err
}

// UniqueName returns prefix followed by a random suffix of letters and
// digits, usable as a stream name, a subject token, a topic or a queue.
func UniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// NATSStream creates a stream with a unique name covering subjects on the
// server at url, and deletes it when t ends. It returns a JetStream handle
// on a connection of its own (closed at cleanup) and the stream.
func NATSStream(t testing.TB, url string, subjects ...string) (jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	return NATSStreamConfig(t, url, jetstream.StreamConfig{Subjects: subjects})
}

// NATSStreamConfig is NATSStream with a full stream configuration. An empty
// cfg.Name is replaced by a unique one.
func NATSStreamConfig(t testing.TB, url string, cfg jetstream.StreamConfig) (jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second), nats.Name("queuebox-test-"+t.Name()))
	if err != nil {
		t.Fatalf("connect to NATS %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	if cfg.Name == "" {
		cfg.Name = UniqueName("QBTEST_")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, cfg)
	if err != nil {
		t.Fatalf("create stream %s %v: %v", cfg.Name, cfg.Subjects, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, cfg.Name); err != nil && nc.IsConnected() {
			t.Logf("delete stream %s: %v", cfg.Name, err)
		}
	})
	return js, s
}

// EmbeddedNATS starts an in-process NATS server with JetStream on
// 127.0.0.1:port (port -1: a free port chosen by the OS), storing JetStream
// data in storeDir (t.TempDir() when empty). The server is shut down when t
// ends. To simulate a restart, Shutdown the server and call EmbeddedNATS
// again with the same storeDir and EmbeddedNATSPort of the old server.
func EmbeddedNATS(t testing.TB, storeDir string, port int) *server.Server {
	t.Helper()
	if storeDir == "" {
		storeDir = t.TempDir()
	}
	opts := &server.Options{
		ServerName: "queuebox-test",
		Host:       "127.0.0.1",
		Port:       port,
		JetStream:  true,
		StoreDir:   storeDir,
		NoLog:      true,
		NoSigs:     true,
	}
	var s *server.Server
	var err error
	// A port just released by a previous server may take a moment to be
	// free again; retry within a deadline.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err = server.NewServer(opts)
		if err != nil {
			t.Fatalf("embedded NATS: %v", err)
		}
		go s.Start()
		if s.ReadyForConnections(10 * time.Second) {
			break
		}
		s.Shutdown()
		if time.Now().After(deadline) {
			t.Fatalf("embedded NATS on port %d with store %s did not become ready", port, storeDir)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// EmbeddedNATSPort returns the TCP port an embedded server listens on.
func EmbeddedNATSPort(s *server.Server) int {
	if a, ok := s.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	addr := s.Addr().String()
	var port int
	_, _ = fmt.Sscanf(addr[strings.LastIndex(addr, ":")+1:], "%d", &port)
	return port
}
