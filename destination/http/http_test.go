package httpdest_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/destination/destinationtest"
	httpdest "github.com/queuebox/queuebox/destination/http"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/redact"
)

// recorder is a receiver that keeps every request it accepts. A request
// with X-Test-Slow is answered once the test releases its token.
type recorder struct {
	mu   sync.Mutex
	cond *sync.Cond
	got  []destinationtest.Received
	read int
	slow map[string]chan struct{}
}

func newRecorder() *recorder {
	r := &recorder{slow: map[string]chan struct{}{}}
	r.cond = sync.NewCond(&r.mu)
	return r
}

// hold makes the request for m wait until the returned release is called.
func (r *recorder) hold(m *outbox.Message) func() {
	token := destinationtest.NewID()
	ch := make(chan struct{})
	r.mu.Lock()
	r.slow[token] = ch
	r.mu.Unlock()
	m.Headers["X-Test-Slow"] = token
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
}

// releaseAll answers every held request (at cleanup, before the server
// closes: Close waits for them).
func (r *recorder) releaseAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for token, ch := range r.slow {
		select {
		case <-ch:
		default:
			close(ch)
		}
		delete(r.slow, token)
	}
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if !strings.HasPrefix(req.URL.Path, "/hooks/") {
		http.NotFound(w, req)
		return
	}
	if token := req.Header.Get("X-Test-Slow"); token != "" {
		r.mu.Lock()
		ch := r.slow[token]
		r.mu.Unlock()
		select {
		case <-ch:
		case <-req.Context().Done():
			return
		}
	}
	if s := req.Header.Get("X-Test-Status"); s != "" {
		code, _ := strconv.Atoi(s)
		http.Error(w, "injected failure", code)
		return
	}
	body, _ := io.ReadAll(req.Body)
	h := map[string]string{}
	for k, v := range req.Header {
		h[k] = v[0]
	}
	r.mu.Lock()
	r.got = append(r.got, destinationtest.Received{
		ID: req.Header.Get("X-Message-Id"), Address: req.URL.Path, Key: req.Header.Get("X-Message-Key"), Headers: h, Body: body,
	})
	r.cond.Broadcast()
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *recorder) receive(ctx context.Context, n int) ([]destinationtest.Received, error) {
	stop := context.AfterFunc(ctx, func() { r.mu.Lock(); r.cond.Broadcast(); r.mu.Unlock() })
	defer stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.got)-r.read < n && ctx.Err() == nil {
		r.cond.Wait()
	}
	end := min(r.read+n, len(r.got))
	out := append([]destinationtest.Received(nil), r.got[r.read:end]...)
	r.read = end
	if len(out) < n {
		return out, ctx.Err()
	}
	return out, nil
}

func logger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newDest(t *testing.T, o httpdest.Options) *httpdest.Destination {
	t.Helper()
	d, err := httpdest.New(context.Background(), o, logger())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func TestConformance(t *testing.T) {
	destinationtest.Run(t, func(t *testing.T) destinationtest.Harness {
		rec := newRecorder()
		srv := httptest.NewServer(rec)
		t.Cleanup(srv.Close)
		t.Cleanup(rec.releaseAll)
		d := newDest(t, httpdest.Options{Name: "hooks", URL: srv.URL + "/hooks/{{ topic }}", Concurrency: 16})
		return destinationtest.Harness{
			Destination: d,
			Topic:       "order.created",
			Address:     "/hooks/order.created",
			Receive:     rec.receive,
			Poison: func(m *outbox.Message, permanent bool) {
				if permanent {
					m.Headers["X-Test-Status"] = "422"
				} else {
					m.Headers["X-Test-Status"] = "503"
				}
			},
			Missing: func(t *testing.T) destination.Destination {
				return newDest(t, httpdest.Options{URL: srv.URL + "/nothing-here/{{ topic }}"})
			},
			Slow: rec.hold,
		}
	}, destinationtest.Features{
		KeyHeader:          true,
		KeyPreserved:       true,
		OrderedPerKey:      true,
		FailureInjection:   true,
		PermanentInjection: true,
		MissingTarget:      true,
		Streamer:           true,
		SlowInjection:      true,
		IdentityHeaders:    []string{"X-Message-Id", "Idempotency-Key"},
		ControlHeaders:     []string{"Upgrade", "Keep-Alive", "Proxy-Authorization", "TE", "Trailer", "x-topic", "X-Attempt"},
	})
}

func msg() outbox.Message {
	return outbox.Message{ID: destinationtest.NewID(), Topic: "t", Payload: []byte(`{}`)}
}

// publishOne publishes one message to a server answering with h and
// returns the message's outcome.
func publishOne(t *testing.T, o httpdest.Options, h http.HandlerFunc) error {
	t.Helper()
	return publishOneMsg(t, o, msg(), h)
}

// publishOneMsg publishes m to a test server answering with h and returns
// m's outcome.
func publishOneMsg(t *testing.T, o httpdest.Options, m outbox.Message, h http.HandlerFunc) error {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	if o.URL == "" {
		o.URL = srv.URL + "/hook"
	}
	d := newDest(t, o)
	err := d.Publish(testenv.Context(t, 10*time.Second), []outbox.Message{m})
	return destination.ErrorAt(err, 0)
}

// TestStatusClasses: each status's class, as the engine reads it.
func TestStatusClasses(t *testing.T) {
	t.Parallel()
	const (
		ok          = "accepted"
		permanent   = "permanent"
		unavailable = "unavailable"
		rowFailed   = "row failed"
	)
	noRoom := func(limit string) string { return "no room " + limit }
	classOf := func(err error) string {
		switch {
		case err == nil:
			return ok
		case outbox.IsPermanent(err):
			return permanent
		case outbox.IsUnavailable(err):
			return unavailable
		case outbox.IsNoRoom(err):
			limit, _ := outbox.NoRoomLimit(err)
			return noRoom(limit)
		}
		return rowFailed
	}
	cases := map[int]string{
		200: ok, 201: ok, 202: ok, 204: ok,
		400: permanent, 410: permanent, 413: permanent, 414: permanent, 422: permanent, 431: permanent,
		401: unavailable, 403: unavailable, 408: unavailable, 502: unavailable, 503: unavailable, 504: unavailable,
		429: noRoom(httpdest.LimitTooManyRequests), 507: noRoom(httpdest.LimitInsufficientStorage),
		404: rowFailed, 405: rowFailed, 409: rowFailed, 418: rowFailed, 500: rowFailed, 501: rowFailed, 505: rowFailed,
	}
	for code, want := range cases {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			err := publishOne(t, httpdest.Options{}, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) })
			if got := classOf(err); got != want {
				t.Fatalf("status %d: %s (%v), want %s", code, got, err, want)
			}
			if err == nil {
				return
			}
			var se *httpdest.StatusError
			if !errors.As(err, &se) || se.StatusCode != code {
				t.Errorf("status %d: error %v carries no StatusError with the code", code, err)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	err := publishOne(t, httpdest.Options{}, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(429)
	})
	if d, ok := outbox.RetryDelay(err); !ok || d != 7*time.Second || !outbox.IsRetryable(err) {
		t.Errorf("Retry-After: 7 → delay %v (%v), retryable %v; want 7s", d, ok, outbox.IsRetryable(err))
	}

	date := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	err = publishOne(t, httpdest.Options{}, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", date)
		w.WriteHeader(503)
	})
	if d, ok := outbox.RetryDelay(err); !ok || d < 80*time.Second || d > 91*time.Second {
		t.Errorf("Retry-After: %s → delay %v (%v); want about 90s", date, d, ok)
	}

	err = publishOne(t, httpdest.Options{MaxRetryAfter: time.Minute}, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "86400")
		w.WriteHeader(503)
	})
	if d, ok := outbox.RetryDelay(err); !ok || d != time.Minute {
		t.Errorf("Retry-After: 86400 with MaxRetryAfter 1m → %v (%v); want 1m", d, ok)
	}

	err = publishOne(t, httpdest.Options{}, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "soon")
		w.WriteHeader(503)
	})
	if _, ok := outbox.RetryDelay(err); ok || err == nil {
		t.Errorf("unparsable Retry-After: want a plain retryable error, got %v", err)
	}

	// Zero, or a date already past (clock skew), is no hint: taken as one,
	// the row would spend its attempts back to back.
	for _, v := range []string{"0", time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)} {
		err = publishOne(t, httpdest.Options{}, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", v)
			w.WriteHeader(503)
		})
		if _, ok := outbox.RetryDelay(err); ok || err == nil || !outbox.IsRetryable(err) {
			t.Errorf("Retry-After: %s: want a plain retryable error (the relay's backoff), got %v", v, err)
		}
	}
}

// TestWhatHTTPCannotCarryIsPermanent: a row header HTTP cannot carry (a
// name with a character outside the token set, a value with a line break
// or a NUL) fails its message permanently before any request (net/http
// would refuse the request on every attempt); the other messages of the
// batch are delivered, and the destination serves the next batch. A row
// header named like one queuebox sets is dropped, not refused, and a topic
// with a line break, queuebox's own header, is sent percent-encoded.
func TestWhatHTTPCannotCarryIsPermanent(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := map[string]http.Header{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get("X-Message-Id")] = r.Header.Clone()
		mu.Unlock()
		w.WriteHeader(204)
	}))
	t.Cleanup(srv.Close)
	d := newDest(t, httpdest.Options{URL: srv.URL + "/hook"})
	ctx := testenv.Context(t, 10*time.Second)
	bad := map[int]map[string]string{
		1: {"X-(Bad)": "name"}, 2: {"X-Café": "name"}, 3: {"X-Split": "a\r\nInjected: 1"}, 4: {"X-Nul": "a\x00b"},
	}
	batch := make([]outbox.Message, 7)
	for i := range batch {
		batch[i] = msg()
		batch[i].Headers = map[string]string{"X-Good": "yes", "x-message-id": "forged"}
		for k, v := range bad[i] {
			batch[i].Headers[k] = v
		}
	}
	batch[5].Topic = "t\nInjected: 1"
	err := d.Publish(ctx, batch)
	for i, m := range batch {
		e := destination.ErrorAt(err, i)
		refused := bad[i] != nil
		switch {
		case refused && (!outbox.IsPermanent(e) || got[m.ID] != nil):
			t.Errorf("message %d: %v (sent: %v); want a permanent failure before any request", i, e, got[m.ID] != nil)
		case !refused && e != nil:
			t.Errorf("message %d: %v; want it delivered", i, e)
		case !refused && (got[m.ID].Get("X-Good") != "yes" || got[m.ID].Get("X-Message-Id") != m.ID):
			t.Errorf("message %d arrived with headers %v", i, got[m.ID])
		}
	}
	if h := got[batch[5].ID]; h.Get("X-Topic") != "t%0AInjected%3A%201" || h.Get("X-Topic-Encoding") != "percent" || h.Get("Injected") != "" {
		t.Errorf("a topic with a line break arrived with headers %v; want it percent-encoded", h)
	}
	if err := d.Publish(ctx, []outbox.Message{msg()}); err != nil {
		t.Fatalf("the next Publish: %v", err)
	}
}

func TestRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	var followed atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved" {
			followed.Store(true)
			return
		}
		http.Redirect(w, r, "/moved", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(srv.Close)
	d := newDest(t, httpdest.Options{URL: srv.URL + "/hook"})
	err := destination.ErrorAt(d.Publish(testenv.Context(t, 5*time.Second), []outbox.Message{msg()}), 0)
	if err == nil || outbox.IsPermanent(err) {
		t.Fatalf("redirect: want a retryable failure, got %v", err)
	}
	if !strings.Contains(err.Error(), `redirect to "/moved" not followed`) {
		t.Errorf("error %q does not say where the redirect pointed", err)
	}
	if followed.Load() {
		t.Error("the redirect was followed")
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs before srv.Close
	d := newDest(t, httpdest.Options{URL: srv.URL + "/hook", Timeout: 100 * time.Millisecond})
	start := time.Now()
	err := destination.ErrorAt(d.Publish(testenv.Context(t, 10*time.Second), []outbox.Message{msg()}), 0)
	if !outbox.IsUnavailable(err) || !strings.Contains(err.Error(), "timed out after 100ms") {
		t.Fatalf("want an unavailable timeout error, got %v", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("timeout took %v", el)
	}

	// The caller's ctx bounds the request too.
	d2 := newDest(t, httpdest.Options{URL: srv.URL + "/hook", Timeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := d2.Publish(ctx, []outbox.Message{msg()}); err == nil {
		t.Fatal("Publish past its ctx: want an error")
	}
}

func TestConnectionRefusedIsUnavailable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	d := newDest(t, httpdest.Options{URL: "http://" + addr + "/hook"})
	ctx := testenv.Context(t, 10*time.Second)
	e := destination.ErrorAt(d.Publish(ctx, []outbox.Message{msg()}), 0)
	if !outbox.IsUnavailable(e) || outbox.IsPermanent(e) {
		t.Fatalf("connection refused: want Unavailable, got %v", e)
	}
	if err := d.Check(ctx); !outbox.IsUnavailable(err) {
		t.Fatalf("Check on a closed port = %v, want Unavailable", err)
	}
}

func TestSnippetTruncatedAndRedacted(t *testing.T) {
	t.Parallel()
	const token = "tok-very-secret-123"
	err := publishOne(t, httpdest.Options{Auth: &httpdest.Auth{Bearer: token}}, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(500)
		// Echo the credentials back, then a long tail.
		_, _ = io.WriteString(w, "bad auth "+r.Header.Get("Authorization")+" "+strings.Repeat("z", 1000))
	})
	if err == nil {
		t.Fatal("want an error")
	}
	s := err.Error()
	if strings.Contains(s, token) {
		t.Errorf("error leaks the bearer token: %s", s)
	}
	if !strings.Contains(s, "Bearer "+redact.Mask) || !strings.Contains(s, "(truncated)") {
		t.Errorf("error %q: want the redacted marker and the truncation marker", s)
	}
	if strings.Count(s, "z") > httpdest.SnippetLimit {
		t.Errorf("snippet not bounded: %d bytes of body in %q", strings.Count(s, "z"), s)
	}

	// Basic credentials and a password in the URL are hidden too.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, _ := r.BasicAuth()
		w.WriteHeader(400)
		_, _ = io.WriteString(w, "user "+u+" pass "+p+" header "+r.Header.Get("Authorization"))
	}))
	t.Cleanup(srv.Close)
	u := strings.Replace(srv.URL, "http://", "http://bob:urlpass99@", 1) + "/hook?token=qs-secret-1"
	d := newDest(t, httpdest.Options{URL: u, Auth: &httpdest.Auth{Username: "alice", Password: "pw-secret-9"}})
	err = destination.ErrorAt(d.Publish(testenv.Context(t, 5*time.Second), []outbox.Message{msg()}), 0)
	if !outbox.IsPermanent(err) {
		t.Fatalf("400: want permanent, got %v", err)
	}
	for _, secret := range []string{"pw-secret-9", "urlpass99", "qs-secret-1", "YWxpY2U6cHctc2VjcmV0LTk="} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error leaks %q: %v", secret, err)
		}
	}
}

func TestAuthAndHeaders(t *testing.T) {
	t.Parallel()
	var got http.Header
	var mu sync.Mutex
	handler := func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
	}
	m := msg()
	m.Headers = map[string]string{"X-Static": "from-row", "Authorization": "forged", "Content-Type": "text/plain", "X-Row": "r"}
	srv := httptest.NewServer(http.HandlerFunc(handler))
	t.Cleanup(srv.Close)
	d := newDest(t, httpdest.Options{URL: srv.URL + "/hook", Auth: &httpdest.Auth{Bearer: "abc"}, Headers: map[string]string{"X-Static": "from-config"}})
	if err := d.Publish(testenv.Context(t, 5*time.Second), []outbox.Message{m}); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"Authorization": "Bearer abc", "X-Static": "from-config", "Content-Type": "application/json",
		"X-Row": "r", "Idempotency-Key": m.ID, "X-Message-Id": m.ID, "X-Attempt": "0", "X-Topic": "t",
	} {
		if v := got.Get(k); v != want {
			t.Errorf("header %s = %q, want %q", k, v, want)
		}
	}

	srv2 := httptest.NewServer(http.HandlerFunc(handler))
	t.Cleanup(srv2.Close)
	d2 := newDest(t, httpdest.Options{URL: srv2.URL + "/hook", Auth: &httpdest.Auth{Username: "alice", Password: "pw"}})
	if err := d2.Publish(testenv.Context(t, 5*time.Second), []outbox.Message{msg()}); err != nil {
		t.Fatal(err)
	}
	req := &http.Request{Header: got}
	if u, p, ok := req.BasicAuth(); !ok || u != "alice" || p != "pw" {
		t.Errorf("basic auth = %q, %q, %v", u, p, ok)
	}
}

func TestConcurrencyBound(t *testing.T) {
	t.Parallel()
	const limit = 3
	var cur, peak atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := cur.Add(1)
		defer cur.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond) // hold the slot so requests overlap
	}))
	t.Cleanup(srv.Close)
	d := newDest(t, httpdest.Options{URL: srv.URL + "/hook", Concurrency: limit})
	msgs := make([]outbox.Message, 60)
	for i := range msgs {
		msgs[i] = msg()
	}
	ctx := testenv.Context(t, 20*time.Second)
	var wg sync.WaitGroup
	for range 2 { // two batches at once share the bound
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.Publish(ctx, msgs); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > limit || p < 2 {
		t.Fatalf("peak concurrent requests = %d, want 2..%d", p, limit)
	}
}

func TestKeyOrderStopsAfterFailure(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Fail") != "" {
			w.WriteHeader(500)
		}
	}))
	t.Cleanup(srv.Close)
	d := newDest(t, httpdest.Options{URL: srv.URL + "/hook"})
	msgs := []outbox.Message{msg(), msg(), msg(), msg()}
	for i := range msgs {
		msgs[i].Key = "k"
	}
	msgs[3].Key = "other"
	msgs[1].Headers = map[string]string{"X-Fail": "1"}
	err := d.Publish(testenv.Context(t, 5*time.Second), msgs)
	for i, wantFail := range []bool{false, true, true, false} {
		if e := destination.ErrorAt(err, i); (e != nil) != wantFail {
			t.Errorf("message %d: error %v, want failure %v", i, e, wantFail)
		}
	}
}

func TestBadOptionsAndCheck(t *testing.T) {
	t.Parallel()
	for name, o := range map[string]httpdest.Options{
		"no url":              {},
		"unknown placeholder": {URL: "http://x/{{ nope }}"},
		"no scheme":           {URL: "example.com/hook"},
		"ftp":                 {URL: "ftp://example.com/hook"},
		"reserved header":     {URL: "http://x/", Headers: map[string]string{"X-Message-Id": "1"}},
		"both auths":          {URL: "http://x/", Auth: &httpdest.Auth{Bearer: "a", Username: "b"}},
	} {
		if _, err := httpdest.New(context.Background(), o, logger()); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	d := newDest(t, httpdest.Options{URL: srv.URL + "/{{ topic }}"})
	if err := d.Check(testenv.Context(t, 5*time.Second)); err != nil {
		t.Fatalf("Check: %v", err)
	}
	_ = d.Close()
	if err := d.Check(context.Background()); err == nil {
		t.Fatal("Check after Close: want an error")
	}
}

// TestNoRoomKeepsRetryAfter: a 429 or a 507 is back-pressure, not the
// row's failure, and the receiver's Retry-After stays readable through it.
func TestNoRoomKeepsRetryAfter(t *testing.T) {
	t.Parallel()
	for code, limit := range map[int]string{429: httpdest.LimitTooManyRequests, 507: httpdest.LimitInsufficientStorage} {
		err := publishOne(t, httpdest.Options{}, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "9")
			w.WriteHeader(code)
		})
		got, ok := outbox.NoRoomLimit(err)
		if d, has := outbox.RetryDelay(err); !ok || got != limit || !has || d != 9*time.Second || outbox.IsUnavailable(err) || outbox.IsPermanent(err) {
			t.Errorf("status %d with Retry-After 9: %v (limit %q %v, delay %v %v); want NoRoom %q with the delay", code, err, got, ok, d, has, limit)
		}
	}
	err := publishOne(t, httpdest.Options{}, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "4")
		w.WriteHeader(503)
	})
	if d, has := outbox.RetryDelay(err); !outbox.IsUnavailable(err) || !has || d != 4*time.Second {
		t.Errorf("503 with Retry-After 4: %v (delay %v %v); want unavailable with the delay", err, d, has)
	}
}

// TestConnectionLostIsUnavailable: a receiver that closes the connection
// without answering is down, not refusing the row.
func TestConnectionLostIsUnavailable(t *testing.T) {
	t.Parallel()
	err := publishOne(t, httpdest.Options{}, func(w http.ResponseWriter, _ *http.Request) {
		conn, _, herr := http.NewResponseController(w).Hijack()
		if herr != nil {
			t.Error(herr)
			return
		}
		_ = conn.Close()
	})
	if !outbox.IsUnavailable(err) || !strings.Contains(err.Error(), "connection lost") {
		t.Fatalf("connection closed without a response: %v; want unavailable, connection lost", err)
	}
}

// TestUntrustedCertificateIsUnavailable: a receiver whose certificate the
// relay does not trust fails every request alike: the destination is out
// of reach until the certificate or tls.caFile is fixed.
func TestUntrustedCertificateIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	t.Cleanup(srv.Close)
	d := newDest(t, httpdest.Options{URL: srv.URL + "/hook"})
	e := destination.ErrorAt(d.Publish(testenv.Context(t, 10*time.Second), []outbox.Message{msg()}), 0)
	if !outbox.IsUnavailable(e) || !strings.Contains(e.Error(), "TLS") {
		t.Fatalf("untrusted certificate: %v; want unavailable, naming TLS", e)
	}
}

// TestPublishEachKeepsKeyOrder: PublishEach sends the messages of one key
// one after another in batch order, and reports each as its answer comes;
// after a failure the later messages of the key are reported not sent,
// without a request.
func TestPublishEachKeepsKeyOrder(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var order []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		order = append(order, r.Header.Get("X-Message-Id"))
		mu.Unlock()
		if r.Header.Get("X-Fail") != "" {
			w.WriteHeader(500)
		}
	}))
	t.Cleanup(srv.Close)
	d := newDest(t, httpdest.Options{URL: srv.URL + "/hook", Concurrency: 8})
	msgs := make([]outbox.Message, 12)
	for i := range msgs {
		msgs[i] = msg()
		msgs[i].Key = []string{"a", "b"}[i%2]
	}
	msgs[7].Headers = map[string]string{"X-Fail": "1"} // key b
	var doneMu sync.Mutex
	errs := map[int]error{}
	d.PublishEach(testenv.Context(t, 10*time.Second), msgs, func(i int, err error) {
		doneMu.Lock()
		defer doneMu.Unlock()
		if _, dup := errs[i]; dup {
			t.Errorf("done called twice for message %d", i)
		}
		errs[i] = err
	})
	pos := map[string]int{}
	for i, id := range order {
		pos[id] = i
	}
	last := map[string]int{}
	for i, m := range msgs {
		e := errs[i]
		switch {
		case m.Key == "b" && i > 7:
			if _, sent := pos[m.ID]; sent || e == nil || !strings.Contains(e.Error(), "earlier in the batch failed") {
				t.Errorf("message %d (key b, after the failure): %v, sent %v; want not sent", i, e, sent)
			}
			continue
		case i == 7 && e == nil, i != 7 && e != nil:
			t.Errorf("message %d: %v", i, e)
		}
		if p, ok := last[m.Key]; ok && pos[m.ID] < p {
			t.Errorf("key %s: message %d sent before the one preceding it in the batch", m.Key, i)
		}
		last[m.Key] = pos[m.ID]
	}
	if len(errs) != len(msgs) {
		t.Errorf("done called for %d of %d messages", len(errs), len(msgs))
	}
}

// TestInvalidRenderedURLIsPermanent: a row whose values make the URL
// template render something that is not an http(s) URL fails permanently;
// the other rows of the batch are delivered. A value in the path is
// escaped, so "%zz" there is a valid path segment.
func TestInvalidRenderedURLIsPermanent(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	paths := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths[r.URL.EscapedPath()] = true
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	d := newDest(t, httpdest.Options{URL: "{{ payload.url }}/hook/{{ key }}", AllowedHosts: []string{host}})
	batch := []outbox.Message{msg(), msg(), msg()}
	batch[0].Key, batch[1].Key, batch[2].Key = "ok", "%zz", "ok"
	batch[0].Payload = []byte(`{"url": "` + srv.URL + `"}`)
	batch[1].Payload = batch[0].Payload
	batch[2].Payload = []byte(`{"url": "ftp://` + host + `"}`)
	err := d.Publish(testenv.Context(t, 10*time.Second), batch)
	for i := range 2 {
		if e := destination.ErrorAt(err, i); e != nil {
			t.Errorf("row %d: %v", i, e)
		}
	}
	if e := destination.ErrorAt(err, 2); !outbox.IsPermanent(e) || !strings.Contains(e.Error(), "not a valid http(s) URL") {
		t.Errorf("a row rendering an ftp URL: %v; want permanent", e)
	}
	if !paths["/hook/ok"] || !paths["/hook/%25zz"] || len(paths) != 2 {
		t.Errorf("requests to %v; want /hook/ok and /hook/%%25zz", paths)
	}
}

// TestURLValuesStayInTheirPlace: a value in a path segment is
// path-escaped ("/" %2F, "?" %3F, "#" %23, ".." %2E%2E), a value in the
// query query-escaped, and the fragment never sent.
func TestURLValuesStayInTheirPlace(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var uris []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		uris = append(uris, r.RequestURI)
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	d := newDest(t, httpdest.Options{URL: srv.URL + "/hooks/{{ key }}?t={{ topic }}#{{ id }}"})
	cases := []struct{ key, topic, want string }{
		{"../../admin/delete?all=true#x", "order.created", "/hooks/..%2F..%2Fadmin%2Fdelete%3Fall=true%23x?t=order.created"},
		{"..", "a&admin=1", "/hooks/%2E%2E?t=a%26admin%3D1"},
		{".", "t", "/hooks/%2E?t=t"},
		{"customer-42", "t", "/hooks/customer-42?t=t"},
	}
	for _, c := range cases {
		m := msg()
		m.Key, m.Topic = c.key, c.topic
		if err := d.Publish(testenv.Context(t, 10*time.Second), []outbox.Message{m}); err != nil {
			t.Fatalf("key %q: %v", c.key, err)
		}
		mu.Lock()
		got := uris[len(uris)-1]
		mu.Unlock()
		if got != c.want {
			t.Errorf("key %q topic %q requested %q, want %q", c.key, c.topic, got, c.want)
		}
	}
}

// TestTemplatedHostNeedsAllowedHosts: a template in the scheme or host is
// refused at New without allowedHosts; with them, a row rendering another
// host is dead before any request, and one rendering an allowed host is
// sent.
func TestTemplatedHostNeedsAllowedHosts(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"http://{{ payload.host }}/hook", "{{ payload.url }}", "http://h{{ key }}/x", "http{{ key }}://h/"} {
		if _, err := httpdest.New(context.Background(), httpdest.Options{URL: u}, logger()); err == nil || !strings.Contains(err.Error(), "allowedHosts") {
			t.Errorf("New(%q) = %v, want an error naming allowedHosts", u, err)
		}
	}
	if _, err := httpdest.New(context.Background(), httpdest.Options{URL: "{{ payload.url }}", AllowedHosts: []string{"https://x/"}}, logger()); err == nil {
		t.Error("allowedHosts with a URL: want an error")
	}
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	d := newDest(t, httpdest.Options{URL: "http://{{ payload.host }}:" + port + "/hook", AllowedHosts: []string{"127.0.0.1", "*.example.com"}})
	good, evil, inject := msg(), msg(), msg()
	good.Payload = []byte(`{"host": "127.0.0.1"}`)
	evil.Payload = []byte(`{"host": "localhost"}`)
	inject.Payload = []byte(`{"host": "127.0.0.1@evil.example.org"}`)
	err := d.Publish(testenv.Context(t, 10*time.Second), []outbox.Message{good, evil, inject})
	if e := destination.ErrorAt(err, 0); e != nil {
		t.Errorf("allowed host: %v", e)
	}
	for i, want := range map[int]string{1: "not in allowedHosts", 2: "host cannot hold"} {
		if e := destination.ErrorAt(err, i); !outbox.IsPermanent(e) || !strings.Contains(e.Error(), want) {
			t.Errorf("message %d: %v; want permanent, %q", i, e, want)
		}
	}
	if hits.Load() != 1 {
		t.Errorf("%d requests, want 1", hits.Load())
	}
}

// TestRowHeaderPolicy: hop-by-hop headers, Host, Content-Length,
// Authorization and the headers queuebox sets are dropped from row headers
// and reported by name; allowHeaders lets a control header through, never
// one queuebox sets.
func TestRowHeaderPolicy(t *testing.T) {
	t.Parallel()
	var got http.Header
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	var dropped []string
	var dmu sync.Mutex
	d := newDest(t, httpdest.Options{URL: srv.URL + "/hook", Headers: map[string]string{"X-Source": "queuebox"},
		AllowHeaders: []string{"proxy-authorization", "X-Topic", "Idempotency-Key"},
		OnDroppedHeader: func(name string) {
			dmu.Lock()
			dropped = append(dropped, name)
			dmu.Unlock()
		}})
	m := msg()
	m.Headers = map[string]string{
		"Connection": "close", "Keep-Alive": "timeout=5", "Proxy-Connection": "x", "TE": "trailers", "Trailer": "X-A",
		"Upgrade": "websocket", "Proxy-Authenticate": "x", "Host": "evil.example", "Content-Length": "1",
		"Authorization": "Bearer row", "X-Topic": "spoofed", "idempotency-key": "forged", "X-Source": "row",
		"X-Message-Key-Encoding": "percent", "Proxy-Authorization": "Basic cm93", "X-Good": "yes",
	}
	if err := d.Publish(testenv.Context(t, 10*time.Second), []outbox.Message{m}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range []string{"Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Upgrade", "Proxy-Authenticate", "Authorization", "X-Message-Key-Encoding"} {
		if v := got.Get(k); v != "" {
			t.Errorf("row header %s arrived: %q", k, v)
		}
	}
	if got.Get("X-Topic") != "t" || got.Get("Idempotency-Key") != m.ID || got.Get("X-Source") != "queuebox" {
		t.Errorf("queuebox's headers replaced by the row's: %v", got)
	}
	if got.Get("X-Good") != "yes" || got.Get("Proxy-Authorization") != "Basic cm93" {
		t.Errorf("X-Good and the allowed Proxy-Authorization did not arrive: %v", got)
	}
	dmu.Lock()
	defer dmu.Unlock()
	slices.Sort(dropped)
	want := []string{"Authorization", "Connection", "Content-Length", "Host", "Keep-Alive", "Proxy-Authenticate", "Proxy-Connection",
		"TE", "Trailer", "Upgrade", "X-Message-Key-Encoding", "X-Source", "X-Topic", "idempotency-key"}
	if !slices.Equal(dropped, want) {
		t.Errorf("dropped %v, want %v", dropped, want)
	}
}

// TestKeyAndTopicPercentEncoded: a key or topic that a header cannot carry
// as it is (a control character, a leading or trailing space) is sent
// percent-encoded with X-Message-Key-Encoding (X-Topic-Encoding): percent,
// not refused; any other goes as it is, without the encoding header.
func TestKeyAndTopicPercentEncoded(t *testing.T) {
	t.Parallel()
	tests := []struct{ key, want, enc string }{
		{"customer-42", "customer-42", ""},
		{"Zoë 42", "Zoë 42", ""},
		{"a\x01b\r\nX-Injected: 1", "a%01b%0D%0AX-Injected%3A%201", "percent"},
		{" padded ", "%20padded%20", "percent"},
		{"tab\tinside", "tab\tinside", ""},
		{"50%\x7f", "50%25%7F", "percent"},
	}
	for _, tt := range tests {
		m := msg()
		m.Key = tt.key
		var h http.Header
		if err := publishOneMsg(t, httpdest.Options{}, m, func(w http.ResponseWriter, r *http.Request) { h = r.Header.Clone() }); err != nil {
			t.Fatalf("key %q: %v", tt.key, err)
		}
		if h.Get("X-Message-Key") != tt.want || h.Get("X-Message-Key-Encoding") != tt.enc || h.Get("X-Injected") != "" {
			t.Errorf("key %q arrived as %q (encoding %q), want %q (%q)", tt.key, h.Get("X-Message-Key"), h.Get("X-Message-Key-Encoding"), tt.want, tt.enc)
		}
		if dec, err := url.PathUnescape(h.Get("X-Message-Key")); tt.enc != "" && (err != nil || dec != tt.key) {
			t.Errorf("key %q: decoded %q, %v", tt.key, dec, err)
		}
	}
}

// TestSnippetRedactedBeforeCut: a receiver that echoes a configured secret
// across the 256th byte of its body leaves no part of it in the error: the
// body is redacted, then cut.
func TestSnippetRedactedBeforeCut(t *testing.T) {
	t.Parallel()
	const secret = "HdrSecret-5544-abcdef"
	for off := httpdest.SnippetLimit - len(secret); off <= httpdest.SnippetLimit; off++ {
		err := publishOne(t, httpdest.Options{Headers: map[string]string{"X-Api-Token": secret}}, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(500)
			_, _ = io.WriteString(w, strings.Repeat("p", off-len("tok="))+"tok="+r.Header.Get("X-Api-Token")+strings.Repeat("q", 300))
		})
		if err == nil {
			t.Fatal("want an error")
		}
		if strings.Contains(err.Error(), secret[:4]) {
			t.Fatalf("secret at %d: the error keeps its start: %v", off, err)
		}
	}
}
