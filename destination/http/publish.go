package httpdest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/destination/cloudevents"
	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/redact"
)

// Publish POSTs every message, at most Concurrency at a time, messages of
// one key in batch order, and reports the outcome per message.
func (d *Destination) Publish(ctx context.Context, msgs []outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	select {
	case <-d.closed:
		return fmt.Errorf("http destination %q: %w", d.name, ErrClosed)
	default:
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("http destination %q: not sent: %w", d.name, err)
	}
	errs := make([]error, len(msgs))
	d.PublishEach(ctx, msgs, func(i int, err error) { errs[i] = err })
	return destination.NewBatchError(errs)
}

// PublishEach POSTs every message as Publish does, and calls done for each
// as soon as its response (or failure) is known: a receiver slow to answer
// one request holds back only that message, and the later ones of its key.
func (d *Destination) PublishEach(ctx context.Context, msgs []outbox.Message, done func(i int, err error)) {
	if len(msgs) == 0 {
		return
	}
	var unusable error
	select {
	case <-d.closed:
		unusable = fmt.Errorf("http destination %q: %w", d.name, ErrClosed)
	default:
		if err := ctx.Err(); err != nil {
			unusable = fmt.Errorf("http destination %q: not sent: %w", d.name, err)
		}
	}
	if unusable != nil {
		for i := range msgs {
			done(i, unusable)
		}
		return
	}
	// Group by key: one sequential lane per non-empty key, one lane per
	// unkeyed message.
	var lanes [][]int
	byKey := map[string]int{}
	for i := range msgs {
		k := msgs[i].Key
		if k == "" {
			lanes = append(lanes, []int{i})
			continue
		}
		if l, ok := byKey[k]; ok {
			lanes[l] = append(lanes[l], i)
			continue
		}
		byKey[k] = len(lanes)
		lanes = append(lanes, []int{i})
	}
	// At most Concurrency goroutines per batch take lanes from a queue (one
	// goroutine per message grew a fresh stack through net/http for every
	// request: ~7 % of the relay's CPU); d.sem bounds the requests in
	// flight across the batches published at once.
	queue := make(chan []int, len(lanes))
	for _, lane := range lanes {
		queue <- lane
	}
	close(queue)
	var wg sync.WaitGroup
	for range min(len(lanes), cap(d.sem)) {
		wg.Go(func() {
			for lane := range queue {
				d.sendLane(ctx, msgs, lane, done)
			}
		})
	}
	wg.Wait()
}

// sendLane sends the messages of one lane (one key) in order; after a
// failure the lane's later messages are not sent.
func (d *Destination) sendLane(ctx context.Context, msgs []outbox.Message, lane []int, done func(int, error)) {
	for n, i := range lane {
		err := d.send(ctx, &msgs[i])
		done(i, err)
		if err != nil && n+1 < len(lane) {
			for _, j := range lane[n+1:] {
				done(j, fmt.Errorf("http destination %q: not sent: message %s of key %q earlier in the batch failed", d.name, msgs[i].ID, msgs[i].Key))
			}
			return
		}
	}
}

func (d *Destination) send(ctx context.Context, m *outbox.Message) error {
	if err := d.checkHeaders(m); err != nil {
		return err
	}
	select {
	case d.sem <- struct{}{}:
		defer func() { <-d.sem }()
	case <-ctx.Done():
		return fmt.Errorf("http destination %q: not sent: %w", d.name, ctx.Err())
	case <-d.closed:
		return fmt.Errorf("http destination %q: %w", d.name, ErrClosed)
	}
	target, err := d.url.RenderEscaped(m, d.urlValue)
	if err != nil {
		return fmt.Errorf("http destination %q: url: %w", d.name, err)
	}
	out, err := d.outgoing(m)
	if err != nil {
		return fmt.Errorf("http destination %q: %w", d.name, err)
	}
	refused, err := d.post(ctx, target, m, out)
	if refused != "" {
		// The receiver refused the access token (401): it may have been
		// revoked or rotated before it expired. Once, with a new one.
		d.tokens.drop(refused)
		_, err = d.post(ctx, target, m, out)
	}
	return err
}

// outgoing is what a message's requests carry besides its headers: the
// body, and the CloudEvents attributes of binary mode.
type outgoing struct {
	body  []byte
	attrs []cloudevents.Attr
}

func (d *Destination) outgoing(m *outbox.Message) (outgoing, error) {
	switch {
	case d.events == nil:
		return outgoing{body: m.Payload}, nil
	case d.events.Structured():
		body, err := d.events.Event(m)
		return outgoing{body: body}, err
	}
	attrs, err := d.events.Attributes(m)
	return outgoing{body: m.Payload, attrs: attrs}, err
}

// post sends one request for m and classifies its outcome. refused is the
// OAuth2 access token a 401 answered, "" otherwise.
func (d *Destination) post(ctx context.Context, target string, m *outbox.Message, out outgoing) (refused string, err error) {
	rctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	// NewRequest parses the URL once; the checks read its result. The
	// redacted form for messages is made only when there is one to write
	// (each parse showed in the profile of an HTTP drain).
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, target, bytes.NewReader(out.body))
	if err != nil || (req.URL.Scheme != "http" && req.URL.Scheme != "https") || req.URL.Host == "" {
		return "", outbox.Permanent(fmt.Errorf("http destination %q: rendered url %q is not a valid http(s) URL", d.name, redactURL(target)))
	}
	if d.allowedHosts != nil && !hostAllowed(req.URL, d.allowedHosts) {
		return "", outbox.Permanent(fmt.Errorf("http destination %q: rendered url %q: host %q is not in allowedHosts", d.name, redactURL(target), req.URL.Host))
	}
	// The fragment is the client's: never sent.
	req.URL.Fragment, req.URL.RawFragment = "", ""
	req.Header = make(http.Header, len(m.Headers)+len(d.headers)+len(out.attrs)+12) // sized once: no map growth per request
	token, err := d.setHeaders(req.Header, m, out)
	if err != nil {
		return "", err
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return "", d.transportError(ctx, rctx, redactURL(target), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return "", nil
	}
	snippet := d.snippet(resp.Body, token)
	if resp.StatusCode == http.StatusUnauthorized && token != "" {
		refused = token
	}
	return refused, d.statusError(resp, redactURL(target), snippet)
}

// snippet returns at most SnippetLimit bytes of body for the error text,
// redacted before it is cut (redact.ReadHead reads enough past the limit
// to mask a secret the cut would split) and quoted, and discards a bounded
// rest so that the connection can be reused.
func (d *Destination) snippet(body io.Reader, token string) string {
	secrets := d.secrets
	if token != "" { // the OAuth2 access token of the request
		secrets = append(slices.Clip(secrets), token)
	}
	head, truncated, _ := redact.ReadHead(body, SnippetLimit, secrets...)
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	s := strings.TrimSpace(strings.ToValidUTF8(head, "?"))
	if s == "" {
		return ""
	}
	s = strconv.Quote(s)
	if truncated {
		s += " (truncated)"
	}
	return s
}

// redact hides the credentials of the destination, and the configured
// secrets, in s.
func (d *Destination) redact(s string) string {
	return redact.String(s, d.secrets...)
}
