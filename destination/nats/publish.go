package nats

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/destination/cloudevents"
	"github.com/queuebox/queuebox/outbox"
)

// Publish publishes msgs asynchronously, at most MaxPending outstanding for
// the destination, then waits for every PubAck. It returns nil, a
// *destination.BatchError, or an error that applies to every message.
func (d *Destination) Publish(ctx context.Context, msgs []outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := d.unusable(ctx); err != nil {
		return err
	}
	errs := make([]error, len(msgs))
	d.PublishEach(ctx, msgs, func(i int, err error) { errs[i] = err })
	return destination.NewBatchError(errs)
}

// unusable is the failure of every message of a batch that cannot start:
// the destination is closed, ctx has ended or the connection is down.
func (d *Destination) unusable(ctx context.Context) error {
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
	return nil
}

// PublishEach publishes msgs as Publish does, and calls done for each
// message as soon as its PubAck (or failure) arrives. When ctx
// ends first, the messages still without an outcome fail with it, and
// PublishEach returns; their acks, when they come, only free window slots.
func (d *Destination) PublishEach(ctx context.Context, msgs []outbox.Message, done func(i int, err error)) {
	if len(msgs) == 0 {
		return
	}
	if err := d.unusable(ctx); err != nil {
		for i := range msgs {
			done(i, err)
		}
		return
	}
	b := &batch{resolved: make([]bool, len(msgs)), done: done, settled: make(chan struct{})}
	// One collector awaits the acks in publish order, as they come (the
	// server acknowledges a stream's messages in the order it stores
	// them): a goroutine per message cost the relay a sixth of its CPU.
	pending := make(chan pendingAck, len(msgs))
	go d.collect(b, pending)

	i := 0
publish:
	for ; i < len(msgs); i++ {
		m := &msgs[i]
		subj, err := d.subject.RenderEscaped(m, d.subjectValue)
		if err == nil {
			err = validSubject(subj, d.secrets)
		}
		if err != nil {
			b.set(i, fmt.Errorf("nats destination %q: subject: %w", d.name, err))
			continue
		}
		msg, size, err := d.natsMsg(subj, m)
		if err != nil {
			b.set(i, fmt.Errorf("nats destination %q: %w", d.name, err))
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
		f, err := d.js.PublishMsgAsync(msg)
		if err != nil {
			<-d.sem
			b.set(i, d.classify(err, subj, size))
			continue
		}
		pending <- pendingAck{i: i, f: f, subject: subj, size: size, sent: sent}
	}
	close(pending)
	for j := i; j < len(msgs); j++ { // never sent: ctx ended
		b.set(j, d.ctxError(ctx))
	}

	select {
	case <-b.settled:
	case <-ctx.Done():
		// Messages whose ack has not come are failures; their settle
		// goroutines keep freeing window slots as the outstanding acks
		// resolve (each ends by ack, error or AckTimeout).
		b.abandon(d.ctxError(ctx))
	}
}

type pendingAck struct {
	i       int
	f       jetstream.PubAckFuture
	subject string
	size    int // subject, headers and payload
	sent    time.Time
}

// batch holds the outcome of one PublishEach call: done is called once per
// message, under mu, so that none is called after PublishEach returns.
type batch struct {
	mu        sync.Mutex
	resolved  []bool
	abandoned bool
	done      func(int, error)
	settled   chan struct{} // closed when every ack has been awaited
}

// set reports message i's outcome, unless it has one already.
func (b *batch) set(i int, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.abandoned && !b.resolved[i] {
		b.resolved[i] = true
		b.done(i, err)
	}
}

// abandon fails every message without an outcome with err; later outcomes
// are ignored.
func (b *batch) abandon(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.abandoned = true
	for i, ok := range b.resolved {
		if !ok {
			b.resolved[i] = true
			b.done(i, err)
		}
	}
}

// collect awaits the PubAck of each message published, in order, reports
// its outcome and frees its window slot; it closes b.settled after the
// last. A denied publish's future stays in jetstream's bounded table of
// outstanding publishes until its ack times out (a publish past the bound
// stalls): its slot moves from the window to deniedSem, which bounds such
// futures to MaxPending, so that the table never holds more than twice
// MaxPending and refusals hold no window slot unless MaxPending of them
// are outstanding.
func (d *Destination) collect(b *batch, pending <-chan pendingAck) {
	defer close(b.settled)
	for p := range pending {
		if d.await(b, p) {
			<-d.sem
			continue
		}
		go func(f jetstream.PubAckFuture) {
			d.deniedSem <- struct{}{}
			<-d.sem
			select {
			case <-f.Ok():
			case err := <-f.Err():
				_ = err // the refusal was reported when the message failed
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

// subjectValue checks a value rendered into the subject: one token, unless
// subjectTokens: allow. The topic is exempt: it is a dotted name by
// contract, and its route's pattern matched its tokens.
func (d *Destination) subjectValue(_ int, name, v string) (string, error) {
	if name == "topic" {
		return v, nil
	}
	if err := d.tokens.Check(v); err != nil {
		if !d.tokens.Span {
			return "", fmt.Errorf("%w (set subjectTokens: allow to let values span subject tokens)", err)
		}
		return "", err
	}
	return v, nil
}

// identityText is the header name a NATS server reads the message id
// from. Servers before 2.10 (2.9 is Debian's) find it by searching the
// whole header block for the text: the name or the value of another header
// holding it, when written first, hides the real Nats-Msg-Id, and
// deduplication is lost.
const identityText = "nats-msg-id"

// dropHeader reports whether row header k (value v) is not sent: the
// headers queuebox sets itself, any Nats-* header (JetStream's
// expectations, rollup, TTL and schedules; unless allowed), and any header
// whose name contains Msg-Id or whose value names Nats-Msg-Id (never
// allowed), all in any case.
func (d *Destination) dropHeader(k, v string) bool {
	switch {
	case reserved(k), destination.ContainsFold(k, "msg-id"), destination.ContainsFold(v, identityText):
		return true
	case d.events != nil && cloudevents.InNamespace(k, ceHeaderPrefix):
		return true
	case destination.HasPrefixFold(k, "nats-"):
		return !d.headers.Allowed(k)
	}
	return false
}

// natsMsg returns the message published for m to subj, and its size
// (subject, headers and payload). A header NATS cannot carry, and a header
// block larger than JetStream stores, fail permanently here, before the
// publish.
func (d *Destination) natsMsg(subj string, m *outbox.Message) (*nats.Msg, int, error) {
	for _, v := range [...]struct{ name, value string }{{HeaderTopic, m.Topic}, {HeaderMessageKey, m.Key}} {
		if destination.ContainsFold(v.value, identityText) {
			return nil, 0, outbox.Permanent(fmt.Errorf("the row's %s value holds the text Nats-Msg-Id, which makes NATS servers before 2.10 miss the message id (no deduplication)", v.name))
		}
	}
	h := make(nats.Header, len(m.Headers)+4)
	// Every header has one value: they share one backing array, one
	// allocation instead of one per header (each value is a full slice
	// expression, so that an append by a reader cannot spill into the next).
	vals := make([]string, 0, len(m.Headers)+4)
	hdrSize := len("NATS/1.0\r\n") + len("\r\n")
	set := func(k, v string) {
		vals = append(vals, v)
		n := len(vals)
		h[k] = vals[n-1 : n : n]
		hdrSize += len(k) + len(": ") + len(v) + len("\r\n")
	}
	for k, v := range m.Headers {
		if d.dropHeader(k, v) {
			d.headers.Dropped(k)
			continue
		}
		if !validHeaderName(k) {
			return nil, 0, outbox.Permanent(fmt.Errorf("row header name %q is not a valid NATS header name (printable ASCII without spaces, colons, quotes or brackets)", k))
		}
		set(k, v)
	}
	set(HeaderMsgID, m.ID)
	set(HeaderTopic, m.Topic)
	set(HeaderAttempt, strconv.Itoa(m.Attempt))
	if m.Key != "" {
		set(HeaderMessageKey, m.Key)
	}
	body, err := d.event(m, set)
	if err != nil {
		return nil, 0, err
	}
	if hdrSize > maxHeaderBytes {
		return nil, 0, outbox.Permanent(fmt.Errorf("the message's headers take %d bytes, more than JetStream's limit of %d (send fewer or smaller row headers)", hdrSize, maxHeaderBytes))
	}
	return &nats.Msg{Subject: subj, Header: h, Data: body}, len(subj) + hdrSize + len(body), nil
}

// ceHeaderPrefix is the prefix of the CloudEvents attributes in NATS
// headers (binary mode); the content type is the content-type header.
const ceHeaderPrefix = "ce-"

// event sets the CloudEvents headers of m, when the destination sends
// events, and returns the body: the payload, or the event in structured
// mode.
func (d *Destination) event(m *outbox.Message, set func(k, v string)) ([]byte, error) {
	switch {
	case d.events == nil:
		return m.Payload, nil
	case d.events.Structured():
		set("content-type", cloudevents.ContentTypeStructured)
		return d.events.Event(m)
	}
	attrs, err := d.events.Attributes(m)
	if err != nil {
		return nil, err
	}
	for _, a := range attrs {
		set(ceHeaderPrefix+a.Name, cloudevents.HeaderValue(a.Value))
	}
	set("content-type", cloudevents.DataContentType)
	return m.Payload, nil
}

// validHeaderName is nats.go's rule for a header name: printable ASCII
// (33-126) without "()/,:;<=>?@[\]{} and the double quote.
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 33 || c > 126 || strings.IndexByte(`"()/,:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
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
