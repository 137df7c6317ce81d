package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/dialect/postgres"
	"github.com/queuebox/queuebox/redact"
)

// errCheckFailed is returned by check when it found problems; they have
// been printed already.
var errCheckFailed = errors.New("check found problems (see above)")

func newCheckCmd(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "check",
		Short: "Validate the config, the table and the destinations; print the DDL that fixes what is missing",
		Long: `check validates the configuration, connects to the database, checks that the
outbox table has every mapped column with a usable type (printing the DDL that
would fix what is missing) and the indexes the claim relies on, and checks
that every destination is reachable. It exits 1 on any problem.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return check(cmd.Context(), cmd.OutOrStdout(), g)
		},
	}
}

// checkNotifyTrigger reports the wake-on-commit trigger of relay.notify:
// one that notifies another channel never wakes the relay, and one of an
// earlier release (a NOTIFY on every insert) serialises the producers'
// commits.
func checkNotifyTrigger(ctx context.Context, w io.Writer, pg *postgres.Dialect, channel string, create bool,
	report func(bool, string, ...any), fix func(string)) {
	t, err := pg.NotifyTriggerState(ctx)
	switch {
	case err != nil:
		report(false, "relay.notify: %s", err)
	case !t.Installed && create:
		report(true, "relay.notify: trigger %s not installed yet; a relay installs it at start (createTrigger)", t.Name)
	case !t.Installed:
		fmt.Fprintf(w, "note  relay.notify: no trigger %s on the table: the application sends NOTIFY %s itself\n", t.Name, channel)
		fix("gate it as in docs/producing.md (Notify), or set relay.notify.createTrigger: true")
	case create && (t.Channel != channel || !t.Gated):
		report(true, "relay.notify: trigger %s (channel %q, gated %v) is replaced at the next relay start (createTrigger)", t.Name, t.Channel, t.Gated)
	case t.Channel != channel:
		report(false, "relay.notify: trigger %s notifies channel %q, but the relay listens on %q: inserts never wake it", t.Name, t.Channel, channel)
		fix(fmt.Sprintf("set relay.notify.channel: %q, or relay.notify.createTrigger: true to replace the trigger's function", t.Channel))
	case !t.Gated:
		fmt.Fprintf(w, "warn  relay.notify: trigger %s notifies on every insert (an earlier release's): each inserting commit waits for the one before it\n", t.Name)
		fix("start a relay once with relay.notify.createTrigger: true; it replaces the function (docs/operations.md, upgrading)")
	default:
		report(true, "relay.notify: trigger %s notifies %q while a relay sleeps", t.Name, channel)
	}
}

func check(ctx context.Context, w io.Writer, g *globalFlags) error {
	failed := false
	report := func(ok bool, format string, args ...any) {
		mark := "ok  "
		if !ok {
			mark = "FAIL"
			failed = true
		}
		fmt.Fprintf(w, "%s  %s\n", mark, fmt.Sprintf(format, args...))
	}
	fix := func(s string) { fmt.Fprintf(w, "      fix: %s\n", s) }

	cfg, err := loadConfig(g)
	if err != nil {
		return err
	}
	report(true, "config %s: %d destinations, %d routes", g.config, len(cfg.Destinations), len(cfg.Routes))
	for _, warn := range cfg.Warnings() {
		fmt.Fprintf(w, "warn  %s\n", warn)
	}
	secrets := cfg.Secrets()

	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	db, err := openDialect(cctx, cfg)
	var se *schemaError
	if errors.As(err, &se) {
		// The table cannot be relayed as configured: say how and why.
		report(true, "database reachable")
		printPlan(w, &se.plan)
		for _, p := range se.plan.Problems {
			report(false, "table %s: %s", se.table, p.What)
			fix(p.Fix)
		}
		for _, a := range se.plan.Advice {
			fmt.Fprintf(w, "note  table %s: %s\n", se.table, a.What)
			fix(a.Fix)
		}
	} else if err != nil {
		report(false, "%s", redact.String(err.Error(), secrets...))
	} else {
		defer db.Close()
		report(true, "database %s reachable", db)
		printPlan(w, db.plan)
		if sc, ok := db.Dialect.(dialect.SchemaChecker); ok {
			rep, err := sc.CheckSchema(cctx)
			switch {
			case err != nil:
				report(false, "table %s: %s", cfg.Database.OutboxTable, redact.String(err.Error(), secrets...))
			case len(rep.Problems) == 0:
				report(true, "table %s has every mapped column", rep.Table)
			}
			for _, p := range rep.Problems {
				report(false, "table %s: %s", rep.Table, p.What)
				fix(p.Fix)
			}
			for _, a := range rep.Advice {
				fmt.Fprintf(w, "note  table %s: %s\n", rep.Table, a.What)
				fix(a.Fix)
			}
			for _, a := range rep.Warnings {
				fmt.Fprintf(w, "warn  table %s: %s\n", rep.Table, a.What)
				fix(a.Fix)
			}
		}
		if pg, ok := postgresDialect(db.Dialect); ok {
			checkStateValues(cctx, w, pg, cfg.Database.OutboxTable)
			if cfg.Relay.Notify.Channel != "" {
				checkNotifyTrigger(cctx, w, pg, cfg.Relay.Notify.Channel, cfg.Relay.Notify.CreateTrigger, report, fix)
			}
		}
	}

	names := make([]string, 0, len(cfg.Destinations))
	for n := range cfg.Destinations {
		names = append(names, n)
	}
	sort.Strings(names)
	log, _ := newLogger(io.Discard, g, cfg)
	for _, name := range names {
		d := cfg.Destinations[name]
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		dest, err := openDestination(dctx, name, d, cfg, log, nil)
		warning := ""
		if err == nil {
			if c, ok := dest.(destination.Checker); ok {
				err = c.Check(dctx)
			}
			if s, ok := dest.(streamWarner); ok && err == nil {
				warning = s.StreamWarning(dctx)
			}
			_ = dest.Close()
		}
		cancel()
		if err != nil {
			report(false, "destination %s (%s): %s", name, d.Type, redact.String(err.Error(), secrets...))
		} else {
			report(true, "destination %s (%s) reachable", name, d.Type)
		}
		if warning != "" {
			fmt.Fprintf(w, "warn  %s\n", redact.String(warning, secrets...))
		}
	}
	if failed {
		return errCheckFailed
	}
	return nil
}

// checkStateValues warns about rows whose state value no state of
// database.states names: nothing would ever claim or count them.
func checkStateValues(ctx context.Context, w io.Writer, pg *postgres.Dialect, table string) {
	const within = 5 * time.Second
	values, ok, err := pg.UnmappedStates(ctx, within)
	switch {
	case err != nil:
		fmt.Fprintf(w, "warn  table %s: could not read the state values: %v\n", table, err)
	case !ok:
		fmt.Fprintf(w, "note  table %s: too large (or locked) to compare every row's state with database.states within %s; if rows do not move, compare SELECT <state column>, count(*) … GROUP BY 1 with the mapping\n", table, within)
	}
	for _, v := range values {
		value := strconv.Quote(v.Value)
		if v.Null {
			value = "NULL"
		}
		fmt.Fprintf(w, "warn  table %s: %d rows have state %s, which no state of database.states names: nothing claims or counts them (a typo in database.states, or a value of the application's own: map it, or set those rows to a mapped one)\n", table, v.Rows, value)
	}
}
