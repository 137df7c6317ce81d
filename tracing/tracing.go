// Package tracing follows each delivered row with an OpenTelemetry span:
// a PRODUCER span named "send <destination>", the child of the row's own
// W3C trace context (its traceparent and tracestate headers, written by
// package producer) or the root of a new trace, sampled as the OTEL_*
// sampler variables say. The message carries that span's traceparent
// (and tracestate), so that the consumer's trace continues from the
// relay's span: producer → outbox → relay → broker → consumer.
//
// Configuration is the standard environment only (autoexport):
// OTEL_TRACES_EXPORTER (otlp, console, none), OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_PROTOCOL (grpc, http/protobuf), OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG,
// OTEL_BSP_*. Tracing is off unless OTEL_TRACES_EXPORTER is set: then no
// exporter is built and no collector is ever dialled, and the relay's
// publish path does no tracing work at all.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/redact"
)

// EnvExporter is the variable that turns tracing on.
const EnvExporter = "OTEL_TRACES_EXPORTER"

// Options configure Setup.
type Options struct {
	// LookupEnv reads the environment (os.LookupEnv).
	LookupEnv func(string) (string, bool)
	// Systems maps each destination's name to its messaging.system
	// (nats, kafka, rabbitmq, http).
	Systems map[string]string
	// Secrets are removed from the error texts recorded on spans.
	Secrets []string
	// Version is service.version.
	Version string
	Logger  *slog.Logger
	// Exporter, when set, replaces the exporter OTEL_TRACES_EXPORTER
	// names (tests); tracing is on.
	Exporter sdktrace.SpanExporter
}

// Tracing is the relay's tracer: a relay.Tracer when Enabled.
type Tracing struct {
	provider *sdktrace.TracerProvider // nil: off
	tracer   trace.Tracer
	prop     propagation.TraceContext
	systems  map[string]string
	dests    map[string]destSpan // per destination in Systems, made once
	secrets  []string
}

// destSpan is what every span of one destination shares: its name and the
// attributes that do not depend on the row.
type destSpan struct {
	name  string
	attrs []attribute.KeyValue
}

// attrPool holds the slices Start hands a span its attributes in.
var attrPool = sync.Pool{New: func() any { s := make([]attribute.KeyValue, 0, 8); return &s }}

func newDestSpan(dest, system string) destSpan {
	return destSpan{name: "send " + dest, attrs: []attribute.KeyValue{
		semconv.MessagingSystemKey.String(system),
		semconv.MessagingDestinationName(dest),
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("send"),
	}}
}

// Setup builds the tracer the environment asks for. Off (OTEL_TRACES_EXPORTER
// unset, empty or none), it builds nothing and Enabled is false.
func Setup(ctx context.Context, o Options) (*Tracing, error) {
	t := &Tracing{systems: o.Systems, secrets: o.Secrets, dests: make(map[string]destSpan, len(o.Systems))}
	for dest, system := range o.Systems {
		t.dests[dest] = newDestSpan(dest, system)
	}
	name, _ := o.LookupEnv(EnvExporter)
	name = strings.TrimSpace(name)
	if o.Exporter == nil && (name == "" || name == "none") {
		return t, nil
	}
	exp := o.Exporter
	if exp == nil {
		var err error
		if exp, err = autoexport.NewSpanExporter(ctx); err != nil {
			return nil, fmt.Errorf("tracing: %s=%s: %w", EnvExporter, name, err)
		}
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("queuebox"), semconv.ServiceVersion(o.Version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	t.provider = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	t.tracer = t.provider.Tracer("github.com/queuebox/queuebox/tracing", trace.WithInstrumentationVersion(o.Version))
	if o.Logger != nil {
		log := o.Logger
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			log.Warn("tracing: export failed", "err", redact.String(err.Error(), o.Secrets...))
		}))
		log.Info("tracing on", "exporter", name)
	}
	return t, nil
}

// Enabled reports whether rows are traced.
func (t *Tracing) Enabled() bool { return t.provider != nil }

// Shutdown exports the spans still buffered and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t.provider == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// Start starts the PRODUCER span of row m bound for destination dest and
// gives m a new header map that carries the span's trace context in place
// of the row's (relay.Tracer). The row's own traceparent is the span's
// parent, never what is sent.
func (t *Tracing) Start(ctx context.Context, dest string, m *outbox.Message) func(error) {
	parent := ctx
	if len(m.Headers) > 0 {
		parent = t.prop.Extract(ctx, rowHeaders(m.Headers))
	}
	ds, ok := t.dests[dest]
	if !ok {
		ds = newDestSpan(dest, t.systems[dest])
	}
	ctx, span := t.tracer.Start(parent, ds.name, trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		// The span copies its attributes: one pooled slice carries them,
		// rather than an option that is copied once more.
		buf := attrPool.Get().(*[]attribute.KeyValue)
		attrs := append(append((*buf)[:0], ds.attrs...),
			semconv.MessagingMessageID(m.ID),
			attribute.String("queuebox.topic", m.Topic))
		if m.Attempt > 0 {
			attrs = append(attrs, attribute.Int("queuebox.attempt", m.Attempt))
		}
		span.SetAttributes(attrs...)
		*buf = attrs
		attrPool.Put(buf)
	}
	h := make(map[string]string, len(m.Headers)+2)
	for k, v := range m.Headers {
		if !strings.EqualFold(k, "traceparent") && !strings.EqualFold(k, "tracestate") {
			h[k] = v
		}
	}
	t.prop.Inject(ctx, propagation.MapCarrier(h))
	m.Headers = h
	return func(err error) {
		if err != nil {
			span.SetStatus(codes.Error, redact.String(err.Error(), t.secrets...))
			span.SetAttributes(attribute.Bool("queuebox.retryable", outbox.IsRetryable(err)))
		}
		span.End()
	}
}

// rowHeaders reads a row's headers as a propagation carrier: names in any
// case, as W3C trace context allows.
type rowHeaders map[string]string

func (h rowHeaders) Get(key string) string {
	if v, ok := h[key]; ok {
		return v
	}
	for k, v := range h {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return ""
}

func (h rowHeaders) Set(string, string) {}

func (h rowHeaders) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// SystemOf is the messaging.system of a destination type.
func SystemOf(destinationType string) string {
	switch destinationType {
	case "amqp":
		return "rabbitmq"
	case "nats", "kafka", "http":
		return destinationType
	}
	return destinationType
}
