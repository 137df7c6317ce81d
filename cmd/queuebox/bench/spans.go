package bench

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"
)

// spanSink is the OTLP/HTTP trace receiver of a traced bench (Options.Trace):
// it counts the spans of each export request and discards them, so that a
// traced drain measures what tracing costs the relay, not a collector's
// work on the same machine.
type spanSink struct {
	srv   *http.Server
	url   string // http://127.0.0.1:port
	spans atomic.Int64
	bad   atomic.Int64 // requests whose body was not an OTLP trace export
}

func openSpanSink(ctx context.Context) (*spanSink, error) {
	s := &spanSink{}
	var err error
	if s.srv, s.url, err = serveLoopback(ctx, s); err != nil {
		return nil, fmt.Errorf("bench: span receiver: %w", err)
	}
	return s, nil
}

func (s *spanSink) close() { _ = s.srv.Close() }

// ServeHTTP takes POST /v1/traces (protobuf, gzip or not) and answers 200
// with an empty ExportTraceServiceResponse.
func (s *spanSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.NotFound(w, r)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			s.bad.Add(1)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer zr.Close()
		body = zr
	}
	b, err := io.ReadAll(body)
	if err == nil {
		var n int
		if n, err = countSpans(b); err == nil {
			s.spans.Add(int64(n))
		}
	}
	if err != nil {
		s.bad.Add(1)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
}

// count is the spans received so far, and an error when some request
// could not be read.
func (s *spanSink) count() (int64, error) {
	if bad := s.bad.Load(); bad > 0 {
		return s.spans.Load(), fmt.Errorf("%d export requests were not OTLP trace exports", bad)
	}
	return s.spans.Load(), nil
}

// countSpans counts the spans of an OTLP ExportTraceServiceRequest in its
// protobuf encoding, reading only field tags and lengths:
// resource_spans (1) → scope_spans (2) → spans (2).
func countSpans(b []byte) (int, error) {
	n := 0
	err := eachMessage(b, 1, func(rs []byte) error {
		return eachMessage(rs, 2, func(ss []byte) error {
			return eachMessage(ss, 2, func([]byte) error { n++; return nil })
		})
	})
	return n, err
}

// eachMessage calls f with the bytes of each length-delimited field num of
// the message b, skipping the other fields.
func eachMessage(b []byte, num protowire.Number, f func([]byte) error) error {
	for len(b) > 0 {
		got, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if got == num && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			if err := f(v); err != nil {
				return err
			}
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(got, typ, b)
		if m < 0 {
			return protowire.ParseError(m)
		}
		b = b[m:]
	}
	return nil
}

// traceEnv is the environment of a traced replica: the bench's own without
// its OTEL_* variables, then every row sampled and exported over OTLP/HTTP
// (protobuf, uncompressed) to endpoint.
func traceEnv(environ []string, endpoint string) []string {
	env := make([]string, 0, len(environ)+5)
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return append(env,
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint,
		"OTEL_TRACES_SAMPLER=always_on",
		"OTEL_SERVICE_NAME=queuebox-bench")
}

// errSpansMissing marks a traced drain whose spans did not all arrive.
var errSpansMissing = errors.New("spans missing")

// checkSpans compares the spans a traced drain exported with its rows.
func checkSpans(spans int64, rows int) error {
	if spans < int64(rows) {
		return fmt.Errorf("%w: %d spans for %d rows (the replicas' span queue overflowed: raise OTEL_BSP_MAX_QUEUE_SIZE, or the export failed: see the replicas' log)", errSpansMissing, spans, rows)
	}
	return nil
}
