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
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
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

// Record returns the Kafka record Publish writes for m.
func (d *Destination) Record(m *outbox.Message) (kafkago.Message, error) {
	topic, err := d.topic.Render(m)
	if err != nil {
		return kafkago.Message{}, err
	}
	if topic == "" {
		return kafkago.Message{}, outbox.Permanent(fmt.Errorf("kafka: topic template %q renders empty for this row", d.topic))
	}
	if err := checkTopic(topic); err != nil {
		return kafkago.Message{}, err
	}
	key, err := d.key.Render(m)
	if err != nil {
		return kafkago.Message{}, err
	}
	rec := kafkago.Message{Topic: topic, Value: m.Payload, Headers: headers(m, d.filter, d.events != nil)}
	if d.events != nil {
		if rec.Value, rec.Headers, err = d.event(m, rec.Headers); err != nil {
			return kafkago.Message{}, err
		}
	}
	if key != "" {
		rec.Key = []byte(key)
	}
	return rec, nil
}

// Headers returns the record headers for m: X-Message-Id, X-Topic and
// X-Attempt, then the row headers in name order. A row header named like
// one of the three (any case) is dropped, as on the NATS and HTTP
// destinations: X-Attempt is 0 on the first delivery, and no
// row can say otherwise.
func Headers(m *outbox.Message) []kafkago.Header { return headers(m, nil, false) }

// ownHeader reports a header name queuebox sets on every record, in any
// case: a row header of that name is never sent.
func ownHeader(k string) bool {
	return strings.EqualFold(k, HeaderMessageID) || strings.EqualFold(k, HeaderTopic) || strings.EqualFold(k, HeaderAttempt)
}

// headers is Headers reporting each row header dropped to f; with events,
// a row header in the CloudEvents namespace (ce_*, content-type) is
// dropped too.
func headers(m *outbox.Message, f *destination.HeaderFilter, events bool) []kafkago.Header {
	hs := make([]kafkago.Header, 0, 3+len(m.Headers))
	hs = append(hs,
		kafkago.Header{Key: HeaderMessageID, Value: []byte(m.ID)},
		kafkago.Header{Key: HeaderTopic, Value: []byte(m.Topic)},
		kafkago.Header{Key: HeaderAttempt, Value: []byte(strconv.Itoa(m.Attempt))})
	names := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		if ownHeader(k) || events && cloudevents.InNamespace(k, ceHeaderPrefix) {
			f.Dropped(k)
			continue
		}
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		hs = append(hs, kafkago.Header{Key: k, Value: []byte(m.Headers[k])})
	}
	return hs
}

// ceHeaderPrefix is the prefix of the CloudEvents attributes in Kafka
// headers (binary mode); the content type is the content-type header.
const ceHeaderPrefix = "ce_"

// event returns the record value and headers of m as a CloudEvent: in
// binary mode the payload, with ce_* and content-type headers; in
// structured mode the event, with content-type.
func (d *Destination) event(m *outbox.Message, hs []kafkago.Header) ([]byte, []kafkago.Header, error) {
	if d.events.Structured() {
		ev, err := d.events.Event(m)
		hs = append(hs, kafkago.Header{Key: "content-type", Value: []byte(cloudevents.ContentTypeStructured)})
		return ev, hs, err
	}
	attrs, err := d.events.Attributes(m)
	if err != nil {
		return nil, nil, err
	}
	for _, a := range attrs {
		hs = append(hs, kafkago.Header{Key: ceHeaderPrefix + a.Name, Value: []byte(a.Value)})
	}
	hs = append(hs, kafkago.Header{Key: "content-type", Value: []byte(cloudevents.DataContentType)})
	return m.Payload, hs, nil
}

// Publish writes msgs and waits for acks from all in-sync replicas. It
// returns nil, a *destination.BatchError with one entry per message, or an
// outbox.Unavailable error when the cluster could not be reached at all.
func (d *Destination) Publish(ctx context.Context, msgs []outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		// Nothing was sent: every message fails, retryably.
		return err
	}
	errs := make([]error, len(msgs))
	recs := make([]kafkago.Message, len(msgs))
	byTopic := map[string][]int{}
	var topics []string
	for i := range msgs {
		rec, err := d.Record(&msgs[i])
		if err != nil {
			errs[i] = err
			continue
		}
		recs[i] = rec
		if _, ok := byTopic[rec.Topic]; !ok {
			topics = append(topics, rec.Topic)
		}
		byTopic[rec.Topic] = append(byTopic[rec.Topic], i)
	}
	// One WriteMessages per topic: kafka-go fails a whole call when the
	// metadata of any of its topics fails, and a missing topic must not
	// fail the records of other topics.
	var wg sync.WaitGroup
	for _, t := range topics {
		idx := byTopic[t]
		if len(topics) == 1 {
			d.write(ctx, recs, idx, errs)
			break
		}
		wg.Go(func() { d.write(ctx, recs, idx, errs) })
	}
	wg.Wait()

	var n, unavailable int
	for _, err := range errs {
		if err != nil {
			n++
			if outbox.IsUnavailable(err) {
				unavailable++
			}
		}
	}
	if n == 0 {
		return nil
	}
	if unavailable == len(msgs) {
		// The cluster could not be reached: one error for the batch, so the
		// engine can pause the destination instead of spending attempts.
		return errs[0]
	}
	return &destination.BatchError{Errs: errs}
}

// write writes recs[idx...] (one topic) and stores each outcome in errs.
func (d *Destination) write(ctx context.Context, recs []kafkago.Message, idx []int, errs []error) {
	pending := append([]int(nil), idx...)
	for len(pending) > 0 {
		batch := make([]kafkago.Message, len(pending))
		for j, i := range pending {
			batch[j] = recs[i]
		}
		err := d.writer.WriteMessages(ctx, batch...)
		var tooLarge kafkago.MessageTooLargeError
		if errors.As(err, &tooLarge) {
			// Refused before sending: larger than BatchBytes. Mark the one
			// record and write the others again.
			j := indexOfRecord(batch, tooLarge.Message)
			if j < 0 {
				j = 0
			}
			errs[pending[j]] = outbox.Permanent(fmt.Errorf("kafka: record of %d bytes is larger than the %d-byte limit: %w",
				len(batch[j].Value), d.writer.BatchBytes, kafkago.MessageSizeTooLarge))
			pending = append(pending[:j], pending[j+1:]...)
			continue
		}
		if err == nil {
			return
		}
		var werrs kafkago.WriteErrors
		if !errors.As(err, &werrs) || len(werrs) != len(batch) {
			cerr := Classify(err)
			for _, i := range pending {
				errs[i] = cerr
			}
			d.log.Debug("kafka write failed", "topic", batch[0].Topic, "records", len(batch), "error", err)
			return
		}
		// kafka-go reports one error per partition batch: a permanent
		// failure of one record (too large for the broker) marks every
		// record of its partition batch. Isolate those by writing each of
		// them alone. The relay keeps at most one record per key in
		// flight, so this does not reorder a key.
		var isolate []int
		for j, e := range werrs {
			if e == nil {
				continue
			}
			cerr := Classify(e)
			if outbox.IsPermanent(cerr) && len(batch) > 1 {
				isolate = append(isolate, pending[j])
				continue
			}
			errs[pending[j]] = cerr
		}
		// One at a time: concurrent calls would be batched together again.
		for _, i := range isolate {
			if err := d.writer.WriteMessages(ctx, recs[i]); err != nil {
				errs[i] = Classify(unwrapSingle(err))
			}
		}
		return
	}
}

func unwrapSingle(err error) error {
	var werrs kafkago.WriteErrors
	if errors.As(err, &werrs) && len(werrs) == 1 && werrs[0] != nil {
		return werrs[0]
	}
	var tooLarge kafkago.MessageTooLargeError
	if errors.As(err, &tooLarge) {
		return kafkago.MessageSizeTooLarge
	}
	return err
}

func indexOfRecord(batch []kafkago.Message, m kafkago.Message) int {
	id := headerValue(m.Headers, HeaderMessageID)
	for j := range batch {
		if headerValue(batch[j].Headers, HeaderMessageID) == id {
			return j
		}
	}
	return -1
}

func headerValue(hs []kafkago.Header, k string) string {
	for _, h := range hs {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
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
