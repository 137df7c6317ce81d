package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"time"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/router"
)

// defaultDuplicateWindow is JetStream's duplicate window when a stream
// sets none, assumed when the stream's cannot be read.
const defaultDuplicateWindow = 2 * time.Minute

// duplicateWindowJSON is one JetStream destination of a replay of sent
// rows: JetStream drops a message whose Nats-Msg-Id it stored within the
// stream's duplicate window, and a replayed row keeps its id.
type duplicateWindowJSON struct {
	Destination   string  `json:"destination"`
	Stream        string  `json:"stream,omitempty"` // the configured stream; absent when found by subject
	Rows          int64   `json:"rows"`             // selected rows routed to it
	WindowSeconds float64 `json:"windowSeconds"`
	// SentAt is when the latest of those rows was sent, EndsAt when the
	// window after it ends, both on the database clock; absent when the
	// table has no updatedAt column (the window cannot be told).
	SentAt *time.Time `json:"sentAt,omitempty"`
	EndsAt *time.Time `json:"endsAt,omitempty"`
	Open   bool       `json:"open"` // the window has not passed (or cannot be told)
	// StreamMissing is true when the configured stream does not exist yet
	// (run creates it): it holds no id to drop a replayed row for.
	StreamMissing bool `json:"streamMissing,omitempty"`
	// remaining is how long the window stays open; 0 when it has passed.
	remaining time.Duration
	assumed   string // why the window is JetStream's default, when it is
}

// jetStreamWindows returns, for a replay of sent rows, every JetStream
// destination the selected rows route to, with its duplicate window, and
// how many rows the selection holds. Destinations are opened without
// changing anything on their server.
func jetStreamWindows(ctx context.Context, odb *operatorDB, p dialect.ReplayParams) ([]duplicateWindowJSON, int64, error) {
	sum, ok := odb.db.(dialect.ReplaySummarizer)
	if !ok {
		return nil, 0, nil
	}
	s, err := sum.ReplayTopics(ctx, p)
	if err != nil {
		return nil, 0, err
	}
	rt, err := newRouter(odb.cfg)
	if err != nil {
		return nil, 0, err
	}
	byDest := map[string]*duplicateWindowJSON{}
	var selected int64
	for _, t := range s.Topics {
		selected += t.Rows
		for _, name := range destinationsOf(rt, t.Topic) {
			d, ok := odb.cfg.Destinations[name]
			if !ok || d.Type != "nats" {
				continue
			}
			w := byDest[name]
			if w == nil {
				w = &duplicateWindowJSON{Destination: name, Stream: d.Stream}
				byDest[name] = w
			}
			w.Rows += t.Rows
			if t.LastUpdated.IsZero() {
				w.Open = true // cannot be told: counts as open
			} else if w.SentAt == nil || t.LastUpdated.After(*w.SentAt) {
				at := t.LastUpdated.UTC()
				w.SentAt = &at
			}
		}
	}
	out := make([]duplicateWindowJSON, 0, len(byDest))
	for name, w := range byDest {
		window, why, missing := duplicateWindowOf(ctx, odb, name)
		w.WindowSeconds, w.assumed = window.Seconds(), why
		switch {
		case missing:
			w.Open, w.StreamMissing = false, true
		case w.SentAt != nil && !w.Open:
			end := w.SentAt.Add(window)
			w.EndsAt = &end
			w.remaining = max(0, end.Sub(s.Now))
			w.Open = w.remaining > 0
		}
		out = append(out, *w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Destination < out[j].Destination })
	return out, selected, nil
}

// destinationsOf is every destination a row of topic may be routed to: the
// first route whose pattern matches, and those after it while the routes
// matched can decline the row (when:).
func destinationsOf(rt *router.Router, topic string) []string {
	var out []string
	for _, r := range rt.Routes() {
		if !r.Pattern.Match(topic) {
			continue
		}
		out = append(out, r.Destination)
		if !r.Conditional() {
			break
		}
	}
	return out
}

// duplicateWindowOf reads the duplicate window of JetStream destination
// name; when it cannot, it returns JetStream's default and why. missing is
// true when the configured stream does not exist (run creates it): it
// holds no message id to drop a replayed row for.
func duplicateWindowOf(ctx context.Context, odb *operatorDB, name string) (window time.Duration, why string, missing bool) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dest, err := openDestinationFor(dctx, name, odb.cfg.Destinations[name], odb.cfg, quiet, nil, true)
	if err != nil {
		return defaultDuplicateWindow, err.Error(), false
	}
	defer dest.Close()
	if c, ok := dest.(streamCreator); ok && c.StreamToCreate() != "" {
		return 0, "", true
	}
	dw, ok := dest.(duplicateWindower)
	if !ok {
		return defaultDuplicateWindow, "the destination cannot tell its stream's window", false
	}
	w, err := dw.DuplicateWindow(dctx)
	if err != nil || w <= 0 {
		if err == nil {
			err = fmt.Errorf("the stream sets no window")
		}
		return defaultDuplicateWindow, err.Error(), false
	}
	return w, "", false
}

// warnDuplicateWindows writes, on stderr, a warning for each window still
// open, and returns the first open one (nil when none is).
func warnDuplicateWindows(w io.Writer, windows []duplicateWindowJSON, yes, dryRun bool) *duplicateWindowJSON {
	var first *duplicateWindowJSON
	for i := range windows {
		d := &windows[i]
		if !d.Open {
			continue
		}
		if first == nil {
			first = d
		}
		window := time.Duration(d.WindowSeconds * float64(time.Second))
		fmt.Fprintf(w, "queuebox: warning: %d selected sent rows go to JetStream (destination %s)", d.Rows, d.Destination)
		if d.EndsAt != nil {
			fmt.Fprintf(w, ", the latest sent at %s, within the stream's duplicate window of %s: it ends at %s (in %s).",
				d.SentAt.Format(time.RFC3339), window, d.EndsAt.Format(time.RFC3339), d.remaining.Round(time.Second))
		} else {
			fmt.Fprintf(w, ", but when they were sent cannot be told (the table has no updatedAt column); the stream's duplicate window is %s.", window)
		}
		if d.assumed != "" {
			fmt.Fprintf(w, " (JetStream's default window, assumed: %s)", d.assumed)
		}
		fmt.Fprintln(w, " JetStream drops a message whose Nats-Msg-Id it stored within the window, and a replayed row keeps its id:")
		switch {
		case dryRun:
			fmt.Fprintln(w, "  replayed now, they would be marked sent and stored nowhere.")
		case yes:
			fmt.Fprintln(w, "  replaying anyway (--yes).")
		default:
			fmt.Fprintln(w, "  replayed now, they would be marked sent and stored nowhere; nothing was replayed.")
		}
	}
	return first
}

// refusedInWindow is the error of a replay refused for an open window.
func refusedInWindow(d *duplicateWindowJSON) error {
	if d.EndsAt == nil {
		return fmt.Errorf("replay refused: JetStream may drop the replayed rows of destination %s as duplicates; pass --yes to replay them anyway", d.Destination)
	}
	return fmt.Errorf("replay refused: JetStream would drop the replayed rows of destination %s as duplicates until %s (in %s); run it again after that, or pass --yes to replay now",
		d.Destination, d.EndsAt.Format(time.RFC3339), d.remaining.Round(time.Second))
}
