package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/queuebox/queuebox/dialect"
)

func newReplayCmd(g *globalFlags) *cobra.Command {
	var (
		ids                             []string
		topic, key, since, until, state string
		dryRun                          bool
		batchSize                       int
	)
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Move dead (or sent) rows back to pending",
		Long: `replay moves the selected dead rows (or, with --state sent, sent rows) back to
pending: attempt 0, due now, last_error and claim cleared, the same id and
sequence. Selectors combine with AND; at least one is required. --since and
--until bound updated_at (when the row died or was sent): since inclusive,
until exclusive; a duration (2h) counts back from the database's clock, the
one updated_at was written with, not this host's. Rows move in batches of --batch-size, each its own short
statement, so a large replay holds no long locks.

It prints "replayed N rows" (or, with --dry-run, "would replay N rows") and
logs one line with the selector and the count. A keyed row whose key has a
row being delivered (processing) is left as it is, and a second line says
how many were left: replayed, it would be its key's head while that row is
out, two rows of one key in flight. Run the replay again once it is sent.`,
		Example: `  queuebox replay --topic 'order.**' --since 2h --dry-run
  queuebox replay --id 0b6f0d8e-4c1a-4d7e-9a57-3f7f2b0c9e11 --id 5d1e...
  queuebox replay --state sent --key customer-42 --since 2024-05-01T00:00:00Z`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if state != "dead" && state != "sent" {
				return usagef("--state %q: want dead or sent", state)
			}
			if batchSize <= 0 {
				return usagef("--batch-size %d: want a positive number", batchSize)
			}
			if err := checkTopicPattern(topic); err != nil {
				return err
			}
			sinceB, err := parseTimeBound("since", since)
			if err != nil {
				return err
			}
			untilB, err := parseTimeBound("until", until)
			if err != nil {
				return err
			}
			// A duration and a time are compared by the database, on its
			// clock; two of a kind here.
			if (!sinceB.at.IsZero() && !untilB.at.IsZero() && !untilB.at.After(sinceB.at)) ||
				(sinceB.ago != nil && untilB.ago != nil && *untilB.ago >= *sinceB.ago) {
				return usagef("--until must be after --since")
			}
			p := dialect.ReplayParams{State: state, IDs: ids, TopicPattern: topic, Key: key, Since: sinceB.at, Until: untilB.at,
				SinceAgo: sinceB.ago, UntilAgo: untilB.ago, DryRun: dryRun, BatchSize: batchSize}
			if p.Empty() {
				return usagef("replay needs a selector: --id, --topic, --key, --since or --until (replaying every %s row is never the default)", state)
			}
			odb, err := openInspector(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer odb.close()
			log, err := newLogger(cmd.ErrOrStderr(), g, odb.cfg)
			if err != nil {
				return err
			}
			res, err := odb.in.Replay(cmd.Context(), p)
			n := res.Moved
			if dryRun {
				n = res.Selected
			}
			attrs := []any{"state", state, "ids", ids, "topic", topic, "key", key, "since", sinceB.String(), "until", untilB.String(), "dry_run", dryRun, "rows", n}
			if left := res.Left(); err == nil && !dryRun && left > 0 {
				attrs = append(attrs, "left", left)
			}
			if errors.Is(err, dialect.ErrBadID) {
				// Checked against the table's id type (uuid, or an
				// adopted table's integer or text id), which only the
				// dialect knows.
				return usagef("%v", err)
			}
			if err != nil {
				log.Error("replay failed", append(attrs, "err", err)...)
				return fmt.Errorf("replay: %w (%d rows moved before the error)", err, res.Moved)
			}
			log.Info("replay", attrs...)
			if dryRun {
				fmt.Fprintf(cmd.OutOrStdout(), "would replay %d rows\n", n)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "replayed %d rows\n", n)
				if left := res.Left(); left > 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "left %d selected rows: their key has a row being delivered (replayed now, two rows of the key would be in flight; run the replay again once it is sent), or they changed meanwhile\n", left)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&ids, "id", nil, "row id (repeatable)")
	f.StringVar(&topic, "topic", "", "topic pattern (\"*\" one token, \"**\" one or more, last only)")
	f.StringVar(&key, "key", "", "exact key")
	f.StringVar(&since, "since", "", "updated at or after: RFC 3339 time, or a duration ago on the database clock (2h)")
	f.StringVar(&until, "until", "", "updated before: RFC 3339 time, or a duration ago on the database clock")
	f.StringVar(&state, "state", "dead", "rows to replay: dead or sent")
	f.BoolVar(&dryRun, "dry-run", false, "print how many rows would move, move nothing")
	f.IntVar(&batchSize, "batch-size", 500, "rows per statement")
	return cmd
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}
