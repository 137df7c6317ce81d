// Package kafka is the Kafka destination of queuebox, built on
// github.com/segmentio/kafka-go.
//
// One kafka.Writer serves a destination. Each row becomes one record: the
// value is the payload, the record key is the rendered key template (the row
// key by default; an empty key is sent as a null key), and the headers are
// X-Message-Id (the row id), X-Topic, X-Attempt and the row's own headers.
// The topic is rendered per message from a template, so one destination can
// write to many topics. Records are partitioned with the murmur2 hash of the
// key, as the Java producer does, and written with acks=all.
//
// A batch is written with one WriteMessages call per topic, and the outcome of
// every record is mapped back to its row through a *destination.BatchError.
// Failures are classified by Kafka error code, never by text: see Classify.
package kafka

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/queuebox/queuebox/address"
	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/destination/cloudevents"
	"github.com/queuebox/queuebox/outbox"
)

// Header names written on every record.
const (
	HeaderMessageID = "X-Message-Id"
	HeaderTopic     = "X-Topic"
	HeaderAttempt   = "X-Attempt"
)

// DefaultKey is the key template used when Options.Key is empty.
const DefaultKey = "{{ key }}"

// Defaults applied by New to zero Options fields.
const (
	DefaultBatchTimeout = 2 * time.Millisecond
	DefaultBatchSize    = 10000
	DefaultBatchBytes   = 1 << 20 // Kafka's default message.max.bytes is 1 MiB (+ overhead)
	DefaultWriteTimeout = 10 * time.Second
	DefaultMaxAttempts  = 3
	DefaultDialTimeout  = 5 * time.Second
)

// SASL mechanisms accepted in SASL.Mechanism.
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
)

// SASL holds broker credentials. The password is a secret: it never appears
// in logs or errors.
type SASL struct {
	Mechanism string // PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	Username  string
	Password  string
}

// Options configure a Kafka destination. They map one to one from the
// `type: kafka` destination of the configuration file: brokers, topic (or
// topicFrom: aggregate_type, which is the template "{{ aggregateType }}"),
// key, sasl, tls and createTopics.
type Options struct {
	// Name is the destination name, used in logs.
	Name string
	// Brokers are the bootstrap brokers, host:port.
	Brokers []string
	// Topic is a template rendered per message: a literal ("ledger"),
	// "{{ aggregateType }}", "events.{{ topic }}" and so on. Required.
	Topic string
	// Key is a template for the record key; empty means DefaultKey. A key
	// that renders empty is sent as a null key (random partition).
	Key string
	// SASL enables SASL authentication when not nil.
	SASL *SASL
	// TLS enables TLS when not nil.
	TLS *tls.Config
	// CreateTopics lets the brokers create a missing topic on first use
	// (when the broker allows it: auto.create.topics.enable). Off by
	// default: a missing topic is an error.
	CreateTopics bool

	// Tuning; zero values take the Default* constants.
	BatchTimeout time.Duration // how long a partial partition batch waits
	BatchSize    int           // records per partition batch
	BatchBytes   int64         // bytes per partition batch, and the largest record sent
	WriteTimeout time.Duration // per produce request
	MaxAttempts  int           // produce attempts inside one Publish
	DialTimeout  time.Duration
	ClientID     string

	// AllowHeaders is accepted for the same key on every destination:
	// Kafka has no broker control headers, so it lets nothing more
	// through. A row header named like one queuebox sets is never sent.
	AllowHeaders []string
	// OnDroppedHeader is called with the name of each row header not
	// sent (nil: not reported).
	OnDroppedHeader func(name string)
	// CloudEvents, when set, sends every row as a CloudEvent in the Kafka
	// binding's binary (ce_* headers) or structured mode.
	CloudEvents *cloudevents.Options
}

// Destination writes outbox messages to Kafka.
type Destination struct {
	name      string
	log       *slog.Logger
	topic     *address.Template
	key       *address.Template
	writer    *kafkago.Writer
	transport *kafkago.Transport
	brokers   []string
	create    bool
	filter    *destination.HeaderFilter
	events    *cloudevents.Encoder // nil: rows are not sent as CloudEvents
	closeOnce sync.Once
	closeErr  error
}

var (
	_ destination.Destination = (*Destination)(nil)
	_ destination.Checker     = (*Destination)(nil)
)

// New returns a Destination for opts. It does not connect: the first Publish
// (or Check) does.
func New(opts Options, log *slog.Logger) (*Destination, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if len(opts.Brokers) == 0 {
		return nil, fmt.Errorf("kafka destination %q: brokers: at least one broker is required", opts.Name)
	}
	if opts.Topic == "" {
		return nil, fmt.Errorf("kafka destination %q: topic: required", opts.Name)
	}
	topic, err := address.ParseTemplate(opts.Topic)
	if err != nil {
		return nil, fmt.Errorf("kafka destination %q: topic: %w", opts.Name, err)
	}
	if opts.Key == "" {
		opts.Key = DefaultKey
	}
	key, err := address.ParseTemplate(opts.Key)
	if err != nil {
		return nil, fmt.Errorf("kafka destination %q: key: %w", opts.Name, err)
	}
	mech, err := saslMechanism(opts.SASL)
	if err != nil {
		return nil, fmt.Errorf("kafka destination %q: sasl: %w", opts.Name, err)
	}
	var events *cloudevents.Encoder
	if opts.CloudEvents != nil {
		if events, err = cloudevents.New(*opts.CloudEvents); err != nil {
			return nil, fmt.Errorf("kafka destination %q: %w", opts.Name, err)
		}
	}
	if opts.BatchTimeout <= 0 {
		opts.BatchTimeout = DefaultBatchTimeout
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.BatchBytes <= 0 {
		opts.BatchBytes = DefaultBatchBytes
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = DefaultMaxAttempts
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.ClientID == "" {
		opts.ClientID = "queuebox"
	}
	transport := &kafkago.Transport{
		DialTimeout: opts.DialTimeout,
		ClientID:    opts.ClientID,
		TLS:         opts.TLS,
		SASL:        mech,
		MetadataTTL: 5 * time.Second,
	}
	w := &kafkago.Writer{
		Addr: kafkago.TCP(opts.Brokers...),
		// No Topic: every record carries its own.
		Balancer:               kafkago.Murmur2Balancer{},
		RequiredAcks:           kafkago.RequireAll,
		MaxAttempts:            opts.MaxAttempts,
		WriteBackoffMin:        20 * time.Millisecond,
		WriteBackoffMax:        500 * time.Millisecond,
		BatchSize:              opts.BatchSize,
		BatchBytes:             opts.BatchBytes,
		BatchTimeout:           opts.BatchTimeout,
		ReadTimeout:            opts.WriteTimeout,
		WriteTimeout:           opts.WriteTimeout,
		Transport:              transport,
		AllowAutoTopicCreation: opts.CreateTopics,
	}
	return &Destination{
		name:      opts.Name,
		log:       log.With("destination", opts.Name, "type", "kafka"),
		topic:     topic,
		key:       key,
		writer:    w,
		transport: transport,
		brokers:   append([]string(nil), opts.Brokers...),
		create:    opts.CreateTopics,
		filter:    destination.NewHeaderFilter(opts.AllowHeaders, opts.OnDroppedHeader),
		events:    events,
	}, nil
}

func saslMechanism(s *SASL) (sasl.Mechanism, error) {
	if s == nil {
		return nil, nil
	}
	switch strings.ToUpper(s.Mechanism) {
	case "", MechanismPlain:
		return plain.Mechanism{Username: s.Username, Password: s.Password}, nil
	case MechanismSCRAMSHA256:
		return scram.Mechanism(scram.SHA256, s.Username, s.Password)
	case MechanismSCRAMSHA512:
		return scram.Mechanism(scram.SHA512, s.Username, s.Password)
	default:
		return nil, fmt.Errorf("unknown mechanism %q (known: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)", s.Mechanism)
	}
}

// Check connects to the brokers and fetches metadata. When the topic
// template is a literal and topic creation is off, it also checks that the
// topic exists.
func (d *Destination) Check(ctx context.Context) error {
	client := &kafkago.Client{Addr: d.writer.Addr, Transport: d.transport, Timeout: d.writer.ReadTimeout}
	req := &kafkago.MetadataRequest{}
	static := d.topic.Static() && !d.create
	var name string
	if static {
		name, _ = d.topic.Render(&outbox.Message{})
		req.Topics = []string{name}
	}
	res, err := client.Metadata(ctx, req)
	if err != nil {
		return Classify(fmt.Errorf("kafka %v: metadata: %w", d.brokers, err))
	}
	if len(res.Brokers) == 0 {
		return outbox.Unavailable(fmt.Errorf("kafka %v: metadata lists no brokers", d.brokers))
	}
	if static {
		for _, t := range res.Topics {
			if t.Name == name && t.Error != nil {
				return fmt.Errorf("kafka topic %q: %w", name, t.Error)
			}
		}
	}
	return nil
}

// Close flushes nothing (writes are synchronous) and releases connections.
// It is idempotent.
func (d *Destination) Close() error {
	d.closeOnce.Do(func() {
		d.closeErr = d.writer.Close()
		d.transport.CloseIdleConnections()
	})
	return d.closeErr
}
