package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/queuebox/queuebox/dialect"
)

// replayOptions are the flags of `queuebox replay`.
type replayOptions struct {
	ids                             []string
	topic, key, since, until, state string
	dryRun, yes                     bool
	batchSize                       int
	output                          outputFormat
}

// replayJSON is what `replay -o json` prints.
type replayJSON struct {
	State    string `json:"state"` // dead or sent
	DryRun   bool   `json:"dryRun"`
	Selected int64  `json:"selected"` // rows the selectors matched
	Replayed int64  `json:"replayed"` // rows moved back to pending (0 on a dry run or when refused)
	Left     int64  `json:"left"`     // selected rows not moved: their key has a row being delivered, or they changed meanwhile
	// Refused is true when the replay did not run: sent rows would go to
	// JetStream within a stream's duplicate window, and --yes was not given.
	Refused bool `json:"refused"`
	// JetStream lists, for a replay of sent rows, each JetStream
	// destination they route to and its duplicate window.
	JetStream []duplicateWindowJSON `json:"jetstream,omitempty"`
}

func newReplayCmd(g *globalFlags) *cobra.Command {
	o := &replayOptions{}
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Move dead (or sent) rows back to pending",
		Long: `replay moves the selected dead rows (or, with --state sent, sent rows) back to
pending: attempt 0, due now, last_error and claim cleared, the same id and
sequence. Selectors combine with AND; at least one is required. --since and
--until bound updated_at (when the row died or was sent): since inclusive,
until exclusive; a duration (2h) counts back from the database's clock, the
one updated_at was written with, not this host's. Rows move in batches of
--batch-size, each its own short statement, so a large replay holds no long
locks; the progress goes to stderr.

It prints "replayed N rows" (or, with --dry-run, "would replay N rows") and
logs one line with the selector and the count. A keyed row whose key has a
row being delivered (processing) is left as it is, and a second line says
how many were left: replayed, it would be its key's head while that row is
out, two rows of one key in flight. Run the replay again once it is sent.

Sent rows that route to JetStream and were sent within the stream's
duplicate window would be dropped by JetStream as duplicates (the message id
stays the row id): replay warns, says when the window ends, and refuses
(exit 1) unless --yes or the window has passed.

-o json prints {"state", "dryRun", "selected", "replayed", "left", "refused",
"jetstream": [{"destination", "stream", "rows", "windowSeconds", "sentAt",
"endsAt", "open", "streamMissing"}]}.`,
		Example: `  queuebox replay --topic 'order.**' --since 2h --dry-run
  queuebox replay --id 0b6f0d8e-4c1a-4d7e-9a57-3f7f2b0c9e11 --id 5d1e...
  queuebox replay --state sent --key customer-42 --since 2024-05-01T00:00:00Z`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, sinceB, untilB, err := o.params()
			if err != nil {
				return err
			}
			return runReplay(cmd, g, o, p, sinceB, untilB)
		},
	}
	f := cmd.Flags()
	addInboxFlag(f, g)
	f.StringArrayVar(&o.ids, "id", nil, "row id (repeatable)")
	f.StringVar(&o.topic, "topic", "", "topic pattern (\"*\" one token, \"**\" one or more, last only)")
	f.StringVar(&o.key, "key", "", "exact key")
	f.StringVar(&o.since, "since", "", "updated at or after: RFC 3339 time, or a duration ago on the database clock (2h)")
	f.StringVar(&o.until, "until", "", "updated before: RFC 3339 time, or a duration ago on the database clock")
	f.StringVar(&o.state, "state", "dead", "rows to replay: dead or sent")
	f.BoolVar(&o.dryRun, "dry-run", false, "print how many rows would move, move nothing")
	f.BoolVar(&o.yes, "yes", false, "replay sent rows although JetStream would drop them as duplicates (within its duplicate window)")
	f.IntVar(&o.batchSize, "batch-size", 500, "rows per statement")
	addOutputFlag(cmd, &o.output)
	return cmd
}

// params checks the flags and returns the replay's selection.
func (o *replayOptions) params() (dialect.ReplayParams, timeBound, timeBound, error) {
	var p dialect.ReplayParams
	if o.state != "dead" && o.state != "sent" {
		return p, timeBound{}, timeBound{}, usagef("--state %q: want dead or sent", o.state)
	}
	if o.batchSize <= 0 {
		return p, timeBound{}, timeBound{}, usagef("--batch-size %d: want a positive number", o.batchSize)
	}
	if err := checkTopicPattern(o.topic); err != nil {
		return p, timeBound{}, timeBound{}, err
	}
	sinceB, err := parseTimeBound("since", o.since)
	if err != nil {
		return p, timeBound{}, timeBound{}, err
	}
	untilB, err := parseTimeBound("until", o.until)
	if err != nil {
		return p, timeBound{}, timeBound{}, err
	}
	// A duration and a time are compared by the database, on its clock;
	// two of a kind here.
	if (!sinceB.at.IsZero() && !untilB.at.IsZero() && !untilB.at.After(sinceB.at)) ||
		(sinceB.ago != nil && untilB.ago != nil && *untilB.ago >= *sinceB.ago) {
		return p, timeBound{}, timeBound{}, usagef("--until must be after --since")
	}
	p = dialect.ReplayParams{State: o.state, IDs: o.ids, TopicPattern: o.topic, Key: o.key, Since: sinceB.at, Until: untilB.at,
		SinceAgo: sinceB.ago, UntilAgo: untilB.ago, DryRun: o.dryRun, BatchSize: o.batchSize}
	if p.Empty() {
		return p, timeBound{}, timeBound{}, usagef("replay needs a selector: --id, --topic, --key, --since or --until (replaying every %s row is never the default)", o.state)
	}
	return p, sinceB, untilB, nil
}

// runReplay looks at the JetStream duplicate windows (sent rows), then
// replays with progress on stderr and prints the report.
func runReplay(cmd *cobra.Command, g *globalFlags, o *replayOptions, p dialect.ReplayParams, sinceB, untilB timeBound) error {
	ctx := cmd.Context()
	odb, err := openInspector(ctx, g)
	if err != nil {
		return err
	}
	defer odb.close()
	log, err := newLogger(cmd.ErrOrStderr(), g, odb.cfg)
	if err != nil {
		return err
	}
	rep := replayJSON{State: p.State, DryRun: p.DryRun}
	if p.State == "sent" {
		var selected int64
		if rep.JetStream, selected, err = jetStreamWindows(ctx, odb, p); err != nil {
			return replayError(err)
		}
		if open := warnDuplicateWindows(cmd.ErrOrStderr(), rep.JetStream, o.yes, p.DryRun); open != nil && !o.yes && !p.DryRun {
			rep.Refused, rep.Selected, rep.Left = true, selected, selected
			if err := printReplay(cmd.OutOrStdout(), o.output, rep); err != nil {
				return err
			}
			return refusedInWindow(open)
		}
	}
	prog := newProgress(g, cmd.ErrOrStderr(), "replay", "rows", -1)
	p.Progress = prog.Set
	res, err := odb.in.Replay(ctx, p)
	prog.Finish()
	rep.Selected, rep.Replayed, rep.Left = res.Selected, res.Moved, res.Left()
	if p.DryRun {
		rep.Replayed, rep.Left = 0, 0
	}
	attrs := []any{"state", p.State, "ids", p.IDs, "topic", p.TopicPattern, "key", p.Key, "since", sinceB.String(), "until", untilB.String(),
		"dry_run", p.DryRun, "rows", map[bool]int64{true: res.Selected, false: res.Moved}[p.DryRun]}
	if err == nil && !p.DryRun && rep.Left > 0 {
		attrs = append(attrs, "left", rep.Left)
	}
	if err != nil {
		if errors.Is(err, dialect.ErrBadID) {
			return replayError(err)
		}
		log.Error("replay failed", append(attrs, "err", err)...)
		return fmt.Errorf("replay: %w (%d rows moved before the error)", err, res.Moved)
	}
	log.Info("replay", attrs...)
	return printReplay(cmd.OutOrStdout(), o.output, rep)
}

// replayError is err as the replay's error: a bad id, checked against the
// table's id type (uuid, or an adopted table's integer or text id), which
// only the dialect knows, is a usage error.
func replayError(err error) error {
	if errors.Is(err, dialect.ErrBadID) {
		return usagef("%v", err)
	}
	return fmt.Errorf("replay: %w", err)
}

func printReplay(w io.Writer, output outputFormat, rep replayJSON) error {
	switch {
	case output.json():
		return printJSON(w, rep)
	case rep.Refused:
		_, err := fmt.Fprintf(w, "replayed 0 rows (refused: %d selected rows are within a JetStream duplicate window)\n", rep.Selected)
		return err
	case rep.DryRun:
		_, err := fmt.Fprintf(w, "would replay %d rows\n", rep.Selected)
		return err
	}
	fmt.Fprintf(w, "replayed %d rows\n", rep.Replayed)
	if rep.Left > 0 {
		fmt.Fprintf(w, "left %d selected rows: their key has a row being delivered (replayed now, two rows of the key would be in flight; run the replay again once it is sent), or they changed meanwhile\n", rep.Left)
	}
	return nil
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}
