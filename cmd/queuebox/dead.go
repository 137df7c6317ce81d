package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/queuebox/queuebox/address"
	"github.com/queuebox/queuebox/config"
	"github.com/queuebox/queuebox/dialect"
)

// operatorDB is what the operator commands (dead, replay, stats) open: the
// config, the dialect as an Inspector and a function that closes it.
type operatorDB struct {
	cfg   *config.Config
	db    dialect.Dialect
	in    dialect.Inspector
	close func()
}

// openInspector loads the config and connects to its database.
func openInspector(ctx context.Context, g *globalFlags) (*operatorDB, error) {
	cfg, err := loadConfig(g)
	if err != nil {
		return nil, err
	}
	if g.inbox {
		onInboxTable(cfg)
	}
	// --log-level and --log-format are checked here for every operator
	// command, also those that log nothing (stats, dead list): a bad value
	// is an error, not silently ignored.
	if _, err := newLogger(io.Discard, g, cfg); err != nil {
		return nil, err
	}
	db, err := openDialect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	in, ok := db.Dialect.(dialect.Inspector)
	if !ok {
		db.Close()
		return nil, fmt.Errorf("database.type %s does not support the operator commands yet", cfg.Database.Type)
	}
	return &operatorDB{cfg: cfg, db: db.Dialect, in: in, close: db.Close}, nil
}

// addInboxFlag adds --inbox to an operator command.
func addInboxFlag(f *pflag.FlagSet, g *globalFlags) {
	f.BoolVar(&g.inbox, "inbox", false, "act on the inbox table (inbox.table, default inbox) instead of the outbox")
}

// onInboxTable points cfg's database at the inbox table, whose columns
// are the bundled outbox's without aggregate_type: the operator commands
// then read and move its rows as they do the outbox's.
func onInboxTable(cfg *config.Config) {
	table := cfg.Inbox.Table
	if table == "" {
		table = config.DefaultInboxTable
	}
	cfg.Database.OutboxTable = table
	cfg.Database.Columns = map[string]string{"aggregateType": ""}
	cfg.Database.States = nil
}

// timeBound is a --since or --until value: an absolute time (at), or a
// duration before now (ago), which the database computes on its own clock
// (the clock updated_at was written with): a time computed here would be
// off by the skew between this host and the database. Neither: no bound.
type timeBound struct {
	at  time.Time
	ago *time.Duration
}

// parseTimeBound reads a --since or --until value: an RFC 3339 time, or a
// Go duration meaning that long before the database's now ("2h" is two
// hours ago).
func parseTimeBound(flag, v string) (timeBound, error) {
	if v == "" {
		return timeBound{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return timeBound{at: t}, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return timeBound{ago: &d}, nil
	}
	return timeBound{}, usagef("--%s %q: want an RFC 3339 time (2024-05-01T12:00:00Z) or a duration ago (90m, 24h)", flag, v)
}

// String is the bound as logged: an RFC 3339 time, "2h0m0s ago" or "".
func (b timeBound) String() string {
	if b.ago != nil {
		return b.ago.String() + " ago"
	}
	return fmtTime(b.at)
}

func checkTopicPattern(p string) error {
	if p == "" {
		return nil
	}
	if _, err := address.ParsePattern(p); err != nil {
		return usagef("--topic: %v", err)
	}
	return nil
}

func newDeadCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dead",
		Short: "List dead rows and release held keys",
		Args:  unknownCommand,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usagef("dead needs a subcommand: list or release")
		},
	}
	cmd.AddCommand(newDeadListCmd(g), newDeadReleaseCmd(g))
	addInboxFlag(cmd.PersistentFlags(), g)
	for _, c := range cmd.Commands() {
		c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	}
	return cmd
}

// deadRowJSON is one element of `dead list --output json`.
type deadRowJSON struct {
	ID        string `json:"id"`
	Topic     string `json:"topic"`
	Key       string `json:"key"`
	Attempt   int    `json:"attempt"`
	LastError string `json:"lastError"`
	// UpdatedAt is absent when the table has no updatedAt column.
	UpdatedAt *time.Time `json:"updatedAt,omitempty"`
	Held      bool       `json:"held"`
}

func newDeadListCmd(g *globalFlags) *cobra.Command {
	var (
		topic, key, since string
		limit             int
		output            outputFormat
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List dead rows, newest first",
		Long: `list shows dead rows, newest first: id, topic, key, attempt, last_error (on one
line, truncated in the text table), updated_at (when the row died) and held
(the row holds its key, relay.onDead: hold: the key's later rows wait for it
until it is replayed or released).

-o json prints an array of objects with the fields id, topic, key, attempt,
lastError (complete), updatedAt (RFC 3339; absent, and "-" in the table, when
the table has no updatedAt column) and held. A long listing shows its
progress on stderr.`,
		Example: `  queuebox dead list --topic 'order.**' --since 24h
  queuebox dead list --key customer-42 -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit <= 0 {
				return usagef("--limit %d: want a positive number", limit)
			}
			if err := checkTopicPattern(topic); err != nil {
				return err
			}
			sinceB, err := parseTimeBound("since", since)
			if err != nil {
				return err
			}
			odb, err := openInspector(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer odb.close()
			prog := newProgress(g, cmd.ErrOrStderr(), "dead list", "rows", int64(limit))
			rows, err := odb.in.DeadList(cmd.Context(), dialect.DeadListParams{TopicPattern: topic, Key: key, Since: sinceB.at, SinceAgo: sinceB.ago, Limit: limit,
				Progress: func(n int) { prog.Set(int64(n), int64(limit)) }})
			prog.Set(int64(len(rows)), int64(len(rows)))
			prog.Finish()
			if err != nil {
				return fmt.Errorf("dead list: %w", err)
			}
			if output.json() {
				return printJSON(cmd.OutOrStdout(), deadRowsJSON(rows))
			}
			return printDeadTable(cmd.OutOrStdout(), rows)
		},
	}
	f := cmd.Flags()
	f.StringVar(&topic, "topic", "", "topic pattern (\"*\" one token, \"**\" one or more, last only)")
	f.StringVar(&key, "key", "", "exact key")
	f.StringVar(&since, "since", "", "died at or after: RFC 3339 time, or a duration ago on the database clock (24h)")
	f.IntVar(&limit, "limit", 50, "the most rows to list")
	addOutputFlag(cmd, &output)
	return cmd
}

// deadRowsJSON is rows as `dead list -o json` prints them.
func deadRowsJSON(rows []dialect.DeadRow) []deadRowJSON {
	js := make([]deadRowJSON, len(rows))
	for i, r := range rows {
		js[i] = deadRowJSON{ID: r.ID, Topic: r.Topic, Key: r.Key, Attempt: r.Attempt, LastError: r.LastError, Held: r.Held}
		if !r.UpdatedAt.IsZero() {
			t := r.UpdatedAt.UTC()
			js[i].UpdatedAt = &t
		}
	}
	return js
}

// maxErrorWidth is the width of the last_error column of the table.
const maxErrorWidth = 60

func printDeadTable(w io.Writer, rows []dialect.DeadRow) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no dead rows")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTOPIC\tKEY\tATTEMPT\tLAST_ERROR\tUPDATED_AT\tHELD")
	for _, r := range rows {
		held := ""
		if r.Held {
			held = "held"
		}
		updated := "-" // the table has no updatedAt column
		if !r.UpdatedAt.IsZero() {
			updated = r.UpdatedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.ID, oneLine(r.Topic, 60), oneLine(r.Key, 40), r.Attempt,
			oneLine(r.LastError, maxErrorWidth), updated, held)
	}
	return tw.Flush()
}

// oneLine folds control characters (newlines, tabs) to spaces, collapses
// runs of spaces and truncates to width runes with an ellipsis.
func oneLine(s string, width int) string {
	var b strings.Builder
	space := false
	n := 0
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			if space || b.Len() == 0 {
				continue
			}
			space, r = true, ' '
		} else {
			space = false
		}
		if n == width-1 {
			b.WriteRune('…')
			return strings.TrimRight(b.String(), " ")
		}
		b.WriteRune(r)
		n++
	}
	return strings.TrimRight(b.String(), " ")
}

// deadReleaseJSON is what `dead release -o json` prints.
type deadReleaseJSON struct {
	Key      string `json:"key"`
	Released int64  `json:"released"` // dead rows whose hold was cleared
}

func newDeadReleaseCmd(g *globalFlags) *cobra.Command {
	var (
		key    string
		output outputFormat
	)
	cmd := &cobra.Command{
		Use:   "release",
		Short: "Let the later rows of a held key flow; its dead rows stay dead",
		Long: `release clears the hold of the dead rows of --key (relay.onDead: hold): the
key's later rows are delivered from the next claim on, while the dead rows
stay dead and can still be listed and replayed. A replayed row keeps its
sequence, so it is delivered as soon as possible, after rows of the key
already in flight.

A key that no dead row holds is an error (exit 1): nothing was released.
-o json prints {"key", "released"} either way.`,
		Example: `  queuebox dead release --key customer-42`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if key == "" {
				return usagef("dead release needs --key")
			}
			odb, err := openInspector(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer odb.close()
			rel, ok := odb.db.(dialect.KeyReleaser)
			if !ok {
				return fmt.Errorf("database.type %s cannot hold keys (relay.onDead: hold is PostgreSQL only): nothing to release", odb.cfg.Database.Type)
			}
			log, err := newLogger(cmd.ErrOrStderr(), g, odb.cfg)
			if err != nil {
				return err
			}
			n, err := rel.ReleaseKey(cmd.Context(), key)
			if err != nil {
				return fmt.Errorf("dead release: %w", err)
			}
			log.Info("dead release", "key", key, "rows", n)
			out := cmd.OutOrStdout()
			switch {
			case output.json():
				err = printJSON(out, deadReleaseJSON{Key: key, Released: n})
			case n > 0:
				_, err = fmt.Fprintf(out, "released key %q: %d dead rows no longer hold it\n", key, n)
			}
			if err == nil && n == 0 {
				return notHeld(odb.cfg.Relay.OnDead, key)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "the held key (required)")
	addOutputFlag(cmd, &output)
	return cmd
}

// notHeld is the error of a release that released nothing, with the likely
// reason.
func notHeld(onDead, key string) error {
	why := "its dead rows were replayed or released already, or it has none (queuebox dead list --key shows them)"
	if onDead != "hold" {
		why = "relay.onDead is " + onDead + ", so no dead row holds its key; only rows that died under relay.onDead: hold do"
	}
	return fmt.Errorf("key %q is not held by any dead row, nothing released: %s", key, why)
}
