package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// exportRequest is an OTLP trace export with the given spans per scope,
// each resource and scope carrying attributes that countSpans must skip.
func exportRequest(t *testing.T, scopes ...int) []byte {
	t.Helper()
	attr := []*commonpb.KeyValue{{Key: "service.name", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "queuebox"}}}}
	rs := &tracepb.ResourceSpans{Resource: &resourcepb.Resource{Attributes: attr}, SchemaUrl: "https://opentelemetry.io/schemas/1.37.0"}
	for _, n := range scopes {
		ss := &tracepb.ScopeSpans{Scope: &commonpb.InstrumentationScope{Name: "queuebox", Attributes: attr}}
		for range n {
			ss.Spans = append(ss.Spans, &tracepb.Span{TraceId: bytes.Repeat([]byte{1}, 16), SpanId: bytes.Repeat([]byte{2}, 8), Name: "send events", Attributes: attr, Kind: tracepb.Span_SPAN_KIND_PRODUCER})
		}
		rs.ScopeSpans = append(rs.ScopeSpans, ss)
	}
	b, err := proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{rs, rs}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCountSpans(t *testing.T) {
	for _, scopes := range [][]int{{}, {0}, {1}, {3, 0, 512}} {
		want := 0
		for _, n := range scopes {
			want += 2 * n // two resources
		}
		got, err := countSpans(exportRequest(t, scopes...))
		if err != nil || got != want {
			t.Errorf("scopes %v: countSpans = %d, %v; want %d", scopes, got, err, want)
		}
	}
	if _, err := countSpans([]byte("not a protobuf message at all")); err == nil {
		t.Error("countSpans of text: no error")
	}
	truncated := exportRequest(t, 5)
	if _, err := countSpans(truncated[:len(truncated)-3]); err == nil {
		t.Error("countSpans of a truncated request: no error")
	}
}

func TestSpanSinkCountsExports(t *testing.T) {
	ctx := context.Background()
	s, err := openSpanSink(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	post := func(body []byte, gz bool) int {
		t.Helper()
		if gz {
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			_, _ = zw.Write(body)
			_ = zw.Close()
			body = b.Bytes()
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/traces", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/x-protobuf")
		if gz {
			req.Header.Set("Content-Encoding", "gzip")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(exportRequest(t, 4), false); code != http.StatusOK {
		t.Fatalf("export answered %d", code)
	}
	if code := post(exportRequest(t, 1, 2), true); code != http.StatusOK {
		t.Fatalf("gzip export answered %d", code)
	}
	if n, err := s.count(); n != 8+6 || err != nil {
		t.Fatalf("count = %d, %v; want 14 spans", n, err)
	}
	if code := post([]byte("junk"), false); code != http.StatusBadRequest {
		t.Errorf("junk answered %d, want 400", code)
	}
	if _, err := s.count(); err == nil {
		t.Error("count after a junk request: no error")
	}
}

func TestCheckSpans(t *testing.T) {
	if err := checkSpans(100, 100); err != nil {
		t.Errorf("100 spans for 100 rows: %v", err)
	}
	if err := checkSpans(99, 100); !errors.Is(err, errSpansMissing) || !strings.Contains(err.Error(), "OTEL_BSP_MAX_QUEUE_SIZE") {
		t.Errorf("99 spans for 100 rows: %v", err)
	}
}

func TestTraceEnvReplacesTheBenchsOTELVariables(t *testing.T) {
	env := traceEnv([]string{"PATH=/bin", "OTEL_TRACES_SAMPLER=traceidratio", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://elsewhere:4318/v1/traces"}, "http://127.0.0.1:1234")
	for _, want := range []string{"PATH=/bin", "OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1234", "OTEL_TRACES_SAMPLER=always_on"} {
		if !slices.Contains(env, want) {
			t.Errorf("environment lacks %s: %q", want, env)
		}
	}
	for _, kv := range env {
		if strings.Contains(kv, "elsewhere") || kv == "OTEL_TRACES_SAMPLER=traceidratio" {
			t.Errorf("the bench's own %s was passed on", kv)
		}
	}
	cmd := replicaCommand("queuebox", "c.yaml", relayConfig{TraceEndpoint: "http://127.0.0.1:1234", MaxProcs: 1})
	if !slices.Contains(cmd.Env, "OTEL_TRACES_EXPORTER=otlp") || !slices.Contains(cmd.Env, "GOMAXPROCS=1") {
		t.Errorf("traced replica with MaxProcs 1: environment %q", cmd.Env)
	}
}
