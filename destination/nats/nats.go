// Package nats is the NATS JetStream destination: each outbox message is
// published asynchronously to a subject rendered from a template, with the
// row id in the Nats-Msg-Id header so that JetStream's duplicate window
// absorbs redeliveries. A batch is published as a whole within a bounded
// window of outstanding acks, then every PubAck is awaited; the outcome is
// reported per message.
//
// Classification (by error value and JetStream API code, never by text):
//
//   - PubAck, including Duplicate=true: success.
//   - no stream covers the subject (no responders): retryable.
//   - payload above the server's max_payload, or above the stream's
//     max_msg_size (API code 10054): permanent.
//   - connection down, reconnecting, closed, ack timeout: outbox.Unavailable.
//   - any other JetStream API error: retryable.
package nats

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/router"
)

// Headers sent with every message (contract §4).
const (
	HeaderMsgID      = "Nats-Msg-Id"
	HeaderTopic      = "X-Topic"
	HeaderAttempt    = "X-Attempt"
	HeaderMessageKey = "X-Message-Key"
)

// Defaults applied by New.
const (
	DefaultMaxPending    = 1024
	DefaultAckTimeout    = 30 * time.Second
	DefaultReconnectWait = 2 * time.Second
	DefaultConnectWait   = 5 * time.Second
)

// Options configures a Destination. The fields map one to one onto the
// `type: nats` destination keys of the configuration.
type Options struct {
	// Name is the destination's name in the configuration; it appears in
	// logs, errors and the NATS connection name.
	Name string
	// Servers are NATS URLs; credentials in them are never logged.
	Servers []string
	// Subject is the subject template ({{ topic }}, {{ key }}, ...).
	Subject string
	// SubjectFrom picks the subject from a row column instead:
	// "topic", "key" or "aggregate_type". Exclusive with Subject.
	SubjectFrom string
	Token       string
	CredsFile   string
	TLS         *tls.Config // nil: no TLS unless a tls:// URL
	// MaxPending bounds the outstanding asynchronous publishes of the
	// destination (shared by concurrent Publish calls). 0: DefaultMaxPending.
	MaxPending int
	// Stream, when set, is checked (or, with CreateStream, created) at New
	// and is the stream DuplicateWindow reports on.
	Stream         string
	CreateStream   bool
	StreamSubjects []string
	// AckTimeout bounds the wait for one PubAck independently of ctx.
	// 0: DefaultAckTimeout.
	AckTimeout time.Duration
	// ReconnectWait is the pause between reconnect attempts.
	// 0: DefaultReconnectWait.
	ReconnectWait time.Duration
	// ConnectTimeout bounds each dial. 0: DefaultConnectWait.
	ConnectTimeout time.Duration
}

// Destination publishes to NATS JetStream. It is safe for concurrent use.
type Destination struct {
	name    string
	subject *router.Template
	stream  string
	nc      *nats.Conn
	js      jetstream.JetStream
	sem     chan struct{}
	// deniedSem holds the futures of refused publishes, which resolve
	// only when their ack times out: a refused message moves its window
	// slot here, so that refusals do not shrink the window unless
	// MaxPending of them are outstanding at once.
	deniedSem chan struct{}
	log       *slog.Logger
	servers   string // redacted, for messages
	denied    *denials

	closeOnce sync.Once
	closed    chan struct{}

	// subjectStream is the stream found covering the static subject when
	// no stream is configured, looked up once for StreamWarning and
	// DuplicateWindow (both asked at the relay's start).
	subjectStreamMu sync.Mutex
	subjectStream   string
}

var (
	_ destination.Destination = (*Destination)(nil)
	_ destination.Checker     = (*Destination)(nil)
)

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("nats destination is closed")

// subjectFromTemplates maps subjectFrom values onto templates.
var subjectFromTemplates = map[string]string{
	"topic":          "{{ topic }}",
	"key":            "{{ key }}",
	"aggregate_type": "{{ aggregateType }}",
	"aggregateType":  "{{ aggregateType }}",
}

// New connects to NATS and returns a Destination. The first connection
// must succeed (the error names the servers); later disconnects are
// reconnected forever and logged. With CreateStream, the stream is created
// when missing.
func New(ctx context.Context, o Options, log *slog.Logger) (*Destination, error) {
	if log == nil {
		log = slog.Default()
	}
	if o.Name == "" {
		o.Name = "nats"
	}
	log = log.With("destination", o.Name, "type", "nats")
	src := o.Subject
	switch {
	case o.Subject != "" && o.SubjectFrom != "":
		return nil, fmt.Errorf("nats destination %q: set subject or subjectFrom, not both", o.Name)
	case o.SubjectFrom != "":
		var ok bool
		if src, ok = subjectFromTemplates[o.SubjectFrom]; !ok {
			return nil, fmt.Errorf("nats destination %q: subjectFrom %q: want topic, key or aggregate_type", o.Name, o.SubjectFrom)
		}
	case o.Subject == "":
		src = "{{ topic }}"
	}
	tmpl, err := router.ParseTemplate(src)
	if err != nil {
		return nil, fmt.Errorf("nats destination %q: subject: %w", o.Name, err)
	}
	if len(o.Servers) == 0 {
		o.Servers = []string{nats.DefaultURL}
	}
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.AckTimeout <= 0 {
		o.AckTimeout = DefaultAckTimeout
	}
	if o.ReconnectWait <= 0 {
		o.ReconnectWait = DefaultReconnectWait
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectWait
	}
	servers := redactURLs(o.Servers)
	denied := newDenials(o.AckTimeout)

	opts := []nats.Option{
		nats.Name("queuebox/" + o.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(o.ReconnectWait),
		nats.Timeout(o.ConnectTimeout),
		// Messages published while disconnected are not buffered: their
		// acks are lost on reconnect anyway, so fail them at once.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "error", err)
			} else {
				log.Info("nats disconnected")
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "server", nc.ConnectedUrlRedacted())
		}),
		nats.ClosedHandler(func(*nats.Conn) { log.Debug("nats connection closed") }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if subj, ok := publishDenied(err); ok {
				denied.add(subj)
			}
			log.Warn("nats asynchronous error", "error", err)
		}),
	}
	if o.Token != "" {
		opts = append(opts, nats.Token(o.Token))
	}
	if o.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.TLS != nil {
		opts = append(opts, nats.Secure(o.TLS))
	}
	nc, err := nats.Connect(strings.Join(o.Servers, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("nats destination %q: connect to %s: %w (check servers, and that nats-server is running and reachable)", o.Name, servers, err)
	}
	// jetstream's table of outstanding publishes holds the window and the
	// refused publishes still waiting for their ack to time out
	// (deniedSem); its default of 4,000 would stall a larger window.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(o.AckTimeout),
		jetstream.WithPublishAsyncMaxPending(2*o.MaxPending))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats destination %q: jetstream: %w", o.Name, err)
	}
	d := &Destination{
		name:      o.Name,
		subject:   tmpl,
		stream:    o.Stream,
		nc:        nc,
		js:        js,
		sem:       make(chan struct{}, o.MaxPending),
		deniedSem: make(chan struct{}, o.MaxPending),
		log:       log,
		servers:   servers,
		denied:    denied,
		closed:    make(chan struct{}),
	}
	if err := d.ensureStream(ctx, o); err != nil {
		nc.Close()
		return nil, err
	}
	log.Info("nats connected", "server", nc.ConnectedUrlRedacted(), "subject", tmpl.String())
	return d, nil
}

func (d *Destination) ensureStream(ctx context.Context, o Options) error {
	if o.CreateStream && o.Stream == "" {
		return fmt.Errorf("nats destination %q: createStream needs stream (a name)", o.Name)
	}
	if o.Stream == "" {
		return nil
	}
	_, err := d.js.Stream(ctx, o.Stream)
	switch {
	case err == nil:
		if o.CreateStream {
			d.log.Info("nats stream exists; configuration left unchanged", "stream", o.Stream)
		}
		return nil
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("nats destination %q: stream %q: %w", o.Name, o.Stream, err)
	case !o.CreateStream:
		return fmt.Errorf("nats destination %q: stream %q does not exist: create it (nats stream add %s --subjects ...), or set createStream: true and streamSubjects: %w", o.Name, o.Stream, o.Stream, err)
	}
	subjects := o.StreamSubjects
	if len(subjects) == 0 {
		if !d.subject.Static() {
			return fmt.Errorf("nats destination %q: createStream with a subject template (%q) needs streamSubjects", o.Name, d.subject.String())
		}
		subjects = []string{d.subject.String()}
	}
	_, err = d.js.CreateStream(ctx, jetstream.StreamConfig{Name: o.Stream, Subjects: subjects, Storage: jetstream.FileStorage})
	switch {
	case err == nil:
		d.log.Info("nats stream created", "stream", o.Stream, "subjects", subjects)
	case errors.Is(err, jetstream.ErrStreamNameAlreadyInUse):
		// It exists with another configuration: leave it alone.
		d.log.Info("nats stream exists; configuration left unchanged", "stream", o.Stream)
	default:
		return fmt.Errorf("nats destination %q: create stream %q %v: %w", o.Name, o.Stream, subjects, err)
	}
	return nil
}

// Publish publishes msgs asynchronously, at most MaxPending outstanding for
// the destination, then waits for every PubAck. It returns nil, a
// *destination.BatchError, or an error that applies to every message.
func (d *Destination) Publish(ctx context.Context, msgs []outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	select {
	case <-d.closed:
		return fmt.Errorf("nats destination %q: %w", d.name, ErrClosed)
	default:
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("nats destination %q: not published: %w", d.name, err)
	}
	if st := d.nc.Status(); st != nats.CONNECTED {
		return outbox.Unavailable(fmt.Errorf("nats destination %q: not connected to %s (%s)", d.name, d.servers, st))
	}

	// The collector awaits acks while the loop below still publishes, so
	// that window slots free up as acks arrive.
	b := &batch{errs: make([]error, len(msgs)), resolved: make([]bool, len(msgs)), done: make(chan struct{})}
	pending := make(chan pendingAck, len(msgs))
	go d.collect(b, pending)

	i := 0
publish:
	for ; i < len(msgs); i++ {
		m := &msgs[i]
		subj, err := d.subject.Render(m)
		if err == nil {
			err = validSubject(subj)
		}
		if err != nil {
			b.set(i, fmt.Errorf("nats destination %q: subject: %w", d.name, err))
			continue
		}
		if d.denied.recent(subj) {
			// Refused within AckTimeout: publishing again would only
			// hold a slot until the ack times out. Once that has passed,
			// one publish asks the server again (a permission granted
			// meanwhile); an acknowledged one clears the refusal.
			b.set(i, d.deniedError(subj))
			continue
		}
		waited := time.Now()
		select {
		case d.sem <- struct{}{}:
		case <-ctx.Done():
			break publish
		}
		if d.denied.since(subj, waited) { // refused while this message waited for its slot
			<-d.sem
			b.set(i, d.deniedError(subj))
			continue
		}
		sent := time.Now() // before the publish: the server's refusal can come before it returns
		f, err := d.js.PublishMsgAsync(d.natsMsg(subj, m))
		if err != nil {
			<-d.sem
			b.set(i, d.classify(err, subj, len(m.Payload)))
			continue
		}
		pending <- pendingAck{i: i, f: f, subject: subj, size: len(m.Payload), sent: sent}
	}
	close(pending)
	for j := i; j < len(msgs); j++ { // never sent: ctx ended
		b.set(j, d.ctxError(ctx))
	}

	select {
	case <-b.done:
		return destination.NewBatchError(b.errs)
	case <-ctx.Done():
		// Messages whose ack has not come are failures; the collector
		// keeps freeing window slots as the outstanding acks resolve
		// (each ends by ack, error or AckTimeout).
		return destination.NewBatchError(b.abandon(d.ctxError(ctx)))
	}
}

type pendingAck struct {
	i       int
	f       jetstream.PubAckFuture
	subject string
	size    int
	sent    time.Time
}

// batch holds the outcome of one Publish call, shared between Publish and
// its collector.
type batch struct {
	mu        sync.Mutex
	errs      []error
	resolved  []bool
	abandoned bool
	done      chan struct{}
}

func (b *batch) set(i int, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.abandoned {
		b.errs[i], b.resolved[i] = err, true
	}
}

// abandon marks every unresolved message as failed with err and returns a
// copy of the outcome; later results are ignored.
func (b *batch) abandon(err error) []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.abandoned = true
	out := make([]error, len(b.errs))
	for i := range out {
		if b.resolved[i] {
			out[i] = b.errs[i]
		} else {
			out[i] = err
		}
	}
	return out
}

func (d *Destination) collect(b *batch, pending <-chan pendingAck) {
	defer close(b.done)
	for p := range pending {
		if d.await(b, p) {
			<-d.sem
			continue
		}
		// Denied: the outcome is set, but the future stays in jetstream's
		// bounded table of outstanding publishes until its ack times out
		// (a publish past the bound stalls). It moves from the window to
		// deniedSem, which bounds such futures to MaxPending: the table
		// never holds more than twice MaxPending, and refusals hold no
		// window slot unless MaxPending of them are outstanding.
		go func(f jetstream.PubAckFuture) {
			d.deniedSem <- struct{}{}
			<-d.sem
			select {
			case <-f.Ok():
			case <-f.Err():
			}
			<-d.deniedSem
		}(p.f)
	}
}

// await waits for p's PubAck and sets its outcome; false when the server
// denied the publish (the future is still unresolved then).
func (d *Destination) await(b *batch, p pendingAck) bool {
	acked := func() bool { // a duplicate ack is a success too
		b.set(p.i, nil)
		d.denied.allowed(p.subject)
		return true
	}
	failed := func(err error) bool {
		b.set(p.i, d.classify(err, p.subject, p.size))
		return true
	}
	for {
		denied := d.denied.changed()
		// An acknowledgement that is there already wins over a refusal
		// of the subject, which may belong to an earlier publish.
		select {
		case <-p.f.Ok():
			return acked()
		case err := <-p.f.Err():
			return failed(err)
		default:
		}
		if d.denied.since(p.subject, p.sent) {
			b.set(p.i, d.deniedError(p.subject))
			return false
		}
		select {
		case <-p.f.Ok():
			return acked()
		case err := <-p.f.Err():
			return failed(err)
		case <-denied:
			// The server refused a publish to some subject. Its PubAck
			// never comes: without this, the message waited AckTimeout
			// and failed as "destination down", so that it spent no
			// attempt, never died, and opened the circuit for every
			// other subject of the destination. Checked again above.
		}
	}
}

func (d *Destination) deniedError(subject string) error {
	return fmt.Errorf("nats destination %q: publish to %q: %w: the server denies the relay's user publish on this subject (grant it, or route the topic elsewhere)",
		d.name, subject, nats.ErrPermissionViolation)
}

// denials records the subjects the server refused a publish to, as it
// reports them: asynchronously, in the connection's error handler. Until
// the first refusal, asking costs an atomic load: it is asked once per
// message.
type denials struct {
	// held is whether last holds anything (probe only ever holds
	// subjects of last): while not, every check answers at once without
	// the lock (the path of every publish on a connection with nothing
	// refused). Set with the map, under mu; a subject acknowledged again
	// clears its entries, and the fast path is back once none is left.
	held       atomic.Bool
	ackTimeout time.Duration // refusals older than this match no publish in flight
	mu         sync.Mutex
	last       map[string]time.Time // subject → the last refusal
	probe      map[string]time.Time // subject → when a publish went out to ask again
	// wake is closed, and replaced, at every refusal (under mu); read
	// without the lock by changed.
	wake atomic.Pointer[chan struct{}]
}

func newDenials(ackTimeout time.Duration) *denials {
	d := &denials{ackTimeout: ackTimeout, last: map[string]time.Time{}, probe: map[string]time.Time{}}
	wake := make(chan struct{})
	d.wake.Store(&wake)
	return d
}

// keep records whether last holds anything (the caller holds mu).
func (d *denials) keep() { d.held.Store(len(d.last) > 0) }

// maxDenied bounds the subjects remembered: a template subject can name
// many, and a refusal matters only to the publishes in flight. Past it,
// the oldest are forgotten: a refusal that a message still waiting for
// its ack needs is lost only when more than maxDenied subjects were
// refused within AckTimeout, and that message then fails when its ack
// times out, as before refusals were watched.
const maxDenied = 1024

func (d *denials) add(subject string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	if _, known := d.last[subject]; !known && len(d.last) >= maxDenied {
		// Forget refusals older than any publish still waiting for its
		// ack (AckTimeout), then the oldest ones: never one a message
		// in flight may still need.
		for s, at := range d.last {
			if now.Sub(at) > d.ackTimeout {
				delete(d.last, s)
				delete(d.probe, s)
			}
		}
		for len(d.last) >= maxDenied {
			oldest, first := "", time.Time{}
			for s, at := range d.last {
				if first.IsZero() || at.Before(first) {
					oldest, first = s, at
				}
			}
			delete(d.last, oldest)
			delete(d.probe, oldest)
		}
	}
	d.last[subject] = now
	delete(d.probe, subject) // answered: refused again
	d.keep()                 // before the wake: a woken waiter sees the refusal
	next := make(chan struct{})
	close(*d.wake.Swap(&next))
}

// changed is closed at the next refusal.
func (d *denials) changed() <-chan struct{} { return *d.wake.Load() }

// recent reports whether a publish to subject was refused within
// AckTimeout, or a probe of it is out. Past AckTimeout it lets one publish
// through to ask the server again (the probe), answered by a refusal
// (add) or an ack (allowed), or given up after AckTimeout.
func (d *denials) recent(subject string) bool {
	if !d.held.Load() {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	at, ok := d.last[subject]
	if !ok {
		return false
	}
	now := time.Now()
	if now.Sub(at) < d.ackTimeout {
		return true
	}
	if p, out := d.probe[subject]; out && now.Sub(p) < d.ackTimeout {
		return true
	}
	d.probe[subject] = now // subject is in last: held stays set
	return false
}

// allowed forgets the refusal of subject, whose publish was acknowledged.
func (d *denials) allowed(subject string) {
	if !d.held.Load() {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.last, subject)
	delete(d.probe, subject)
	d.keep()
}

// since reports whether a publish to subject was refused at or after t
// (a probe is not a refusal).
func (d *denials) since(subject string, t time.Time) bool {
	if !d.held.Load() {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	at, ok := d.last[subject]
	return ok && !at.Before(t)
}

// publishDenied returns the subject of a publish permissions violation, as
// the server words it (Permissions Violation for Publish to "x"); nats.go
// parses the same text for subscriptions, having no other form of it.
func publishDenied(err error) (string, bool) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return "", false
	}
	m := publishDeniedRe.FindStringSubmatch(err.Error())
	if m == nil {
		return "", false
	}
	return m[1], true
}

var publishDeniedRe = regexp.MustCompile(`(?i)permissions violation for publish to "([^"]+)"`)

func (d *Destination) natsMsg(subj string, m *outbox.Message) *nats.Msg {
	h := make(nats.Header, len(m.Headers)+4)
	// Every header has one value: they share one backing array, one
	// allocation instead of one per header (each value is a full slice
	// expression, so that an append by a reader cannot spill into the next).
	vals := make([]string, 0, len(m.Headers)+4)
	set := func(k, v string) {
		vals = append(vals, v)
		n := len(vals)
		h[k] = vals[n-1 : n : n]
	}
	for k, v := range m.Headers {
		if reserved(k) {
			continue
		}
		set(k, v)
	}
	set(HeaderMsgID, m.ID)
	set(HeaderTopic, m.Topic)
	set(HeaderAttempt, strconv.Itoa(m.Attempt))
	if m.Key != "" {
		set(HeaderMessageKey, m.Key)
	}
	return &nats.Msg{Subject: subj, Header: h, Data: m.Payload}
}

// reserved reports whether a row header would collide with a header the
// destination sets itself; such row headers are dropped.
func reserved(k string) bool {
	for _, r := range [...]string{HeaderMsgID, HeaderTopic, HeaderAttempt, HeaderMessageKey} {
		if strings.EqualFold(k, r) {
			return true
		}
	}
	return false
}

func (d *Destination) ctxError(ctx context.Context) error {
	err := fmt.Errorf("nats destination %q: no PubAck before the context ended: %w", d.name, ctx.Err())
	if !d.nc.IsConnected() {
		return outbox.Unavailable(err)
	}
	return err
}

// classify maps a publish or ack error onto the outbox classification.
func (d *Destination) classify(err error, subj string, size int) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("nats destination %q: no JetStream stream covers subject %q; create a stream that covers it, or set stream, createStream: true and streamSubjects covering it (rows that die meanwhile: queuebox replay): %w", d.name, subj, err)
	case errors.Is(err, nats.ErrMaxPayload):
		return outbox.Permanent(fmt.Errorf("nats destination %q: message of %d bytes exceeds the server's max_payload of %d bytes: %w", d.name, size, d.nc.MaxPayload(), err))
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum:
		return outbox.Permanent(fmt.Errorf("nats destination %q: message of %d bytes exceeds the stream's max_msg_size (subject %q): %w", d.name, size, subj, err))
	case errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrReconnectBufExceeded),
		errors.Is(err, nats.ErrConnectionDraining), errors.Is(err, nats.ErrTimeout),
		errors.Is(err, jetstream.ErrAsyncPublishTimeout), errors.Is(err, nats.ErrStaleConnection),
		errors.Is(err, jetstream.ErrTooManyStalledMsgs):
		return outbox.Unavailable(fmt.Errorf("nats destination %q: %s: %w", d.name, d.servers, err))
	default:
		return fmt.Errorf("nats destination %q: publish to %q: %w", d.name, subj, err)
	}
}

// validSubject rejects subjects NATS cannot publish to: empty, with
// whitespace, empty tokens or wildcards. Such a row never publishes.
func validSubject(s string) error {
	if s == "" {
		return outbox.Permanent(errors.New("rendered subject is empty"))
	}
	if strings.ContainsAny(s, " \t\r\n") {
		return outbox.Permanent(fmt.Errorf("subject %q contains whitespace", s))
	}
	for tok := range strings.SplitSeq(s, ".") {
		switch tok {
		case "":
			return outbox.Permanent(fmt.Errorf("subject %q has an empty token", s))
		case "*", ">":
			return outbox.Permanent(fmt.Errorf("subject %q contains a wildcard", s))
		}
	}
	return nil
}

// Check reports whether the connection is up and the JetStream account
// answers.
func (d *Destination) Check(ctx context.Context) error {
	select {
	case <-d.closed:
		return ErrClosed
	default:
	}
	if st := d.nc.Status(); st != nats.CONNECTED {
		return outbox.Unavailable(fmt.Errorf("nats destination %q: not connected to %s (%s)", d.name, d.servers, st))
	}
	if _, err := d.js.AccountInfo(ctx); err != nil {
		return outbox.Unavailable(fmt.Errorf("nats destination %q: JetStream account: %w", d.name, err))
	}
	return nil
}

// StreamWarning says what the destination cannot know about where its
// messages will be stored, and the fix; "" when nothing is in doubt. With
// stream set, New has checked (or created) the stream. Without it, a
// static subject is looked up: no stream covering it means every publish
// fails, each row is retried and then dead. A subject template cannot be
// checked at all: a row whose subject no stream covers fails the same way,
// and only at its first publish. `queuebox check` and the relay's start
// print it.
func (d *Destination) StreamWarning(ctx context.Context) string {
	if d.stream != "" {
		return ""
	}
	if !d.subject.Static() {
		return fmt.Sprintf("nats destination %q: subject %q is a template and no stream is set, so nothing checks that a JetStream stream covers the subjects it renders; a row whose subject no stream covers is retried, then dead. Set stream (and createStream: true with streamSubjects to have the relay create it)", d.name, d.subject.String())
	}
	_, err := d.streamOfSubject(ctx)
	switch {
	case err == nil:
		return ""
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Sprintf("nats destination %q: no JetStream stream covers subject %q: every publish will fail, and each row be retried, then dead. Create a stream for it, or set stream and createStream: true", d.name, d.subject.String())
	}
	return fmt.Sprintf("nats destination %q: could not look up the stream of subject %q: %v", d.name, d.subject.String(), err)
}

// DuplicateWindow returns the duplicate window of the configured stream, or
// of the stream covering the subject when the subject is static. The engine
// warns when it is shorter than lease + longest backoff: a redelivery after
// the window is stored twice.
func (d *Destination) DuplicateWindow(ctx context.Context) (time.Duration, error) {
	name := d.stream
	if name == "" {
		if !d.subject.Static() {
			return 0, fmt.Errorf("nats destination %q: subject %q is a template; set stream to know the duplicate window", d.name, d.subject.String())
		}
		var err error
		name, err = d.streamOfSubject(ctx)
		if err != nil {
			return 0, fmt.Errorf("nats destination %q: stream for subject %q: %w", d.name, d.subject.String(), err)
		}
	}
	s, err := d.js.Stream(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("nats destination %q: stream %q: %w", d.name, name, err)
	}
	return s.CachedInfo().Config.Duplicates, nil
}

// streamOfSubject returns the stream covering the static subject. A stream
// found is remembered; a failed lookup is not, so the next call asks again.
func (d *Destination) streamOfSubject(ctx context.Context) (string, error) {
	d.subjectStreamMu.Lock()
	defer d.subjectStreamMu.Unlock()
	if d.subjectStream != "" {
		return d.subjectStream, nil
	}
	name, err := d.js.StreamNameBySubject(ctx, d.subject.String())
	if err != nil {
		return "", err
	}
	d.subjectStream = name
	return name, nil
}

// Close drains and closes the connection. It is idempotent.
func (d *Destination) Close() error {
	d.closeOnce.Do(func() {
		close(d.closed)
		if err := d.nc.Drain(); err != nil {
			d.nc.Close()
		}
		// Futures still outstanding (refused publishes waiting for their
		// ack to time out) resolve now, and their waiters end.
		d.js.CleanupPublisher()
	})
	return nil
}

// redactURLs returns the server list with passwords and tokens hidden.
func redactURLs(servers []string) string {
	out := make([]string, len(servers))
	for i, s := range servers {
		u, err := url.Parse(s)
		if err != nil || u.User == nil {
			if strings.Contains(s, "@") {
				out[i] = "<redacted>@" + s[strings.LastIndex(s, "@")+1:]
			} else {
				out[i] = s
			}
			continue
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		} else {
			u.User = url.User("xxxxx") // a bare token
		}
		out[i] = u.String()
	}
	return strings.Join(out, ",")
}
