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

	"github.com/queuebox/queuebox/config"
	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/dialect/postgres"
	"github.com/queuebox/queuebox/redact"
)

// errCheckFailed is returned by check when it found problems; they are in
// its report.
var errCheckFailed = errors.New("check found problems (the FAIL findings)")

func newCheckCmd(g *globalFlags) *cobra.Command {
	var output outputFormat
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Validate the config, the table and the destinations; print the DDL that fixes what is missing",
		Long: `check validates the configuration, connects to the database, checks that the
outbox table has every mapped column with a usable type (printing the DDL that
would fix what is missing) and the indexes the claim relies on, and checks
that every destination is reachable. It exits 1 on any problem.

check changes nothing: a JetStream stream that 'run' would create
(createStream: true) is reported missing, not created.

-o json prints {"ok", "findings": [{"level", "message", "fix"}]}, level one
of ok, fail, warn, note, info.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := check(cmd.Context(), g)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if output.json() {
				err = printJSON(out, rep)
			} else {
				err = rep.printText(out)
			}
			if err == nil && !rep.OK {
				err = errCheckFailed
			}
			return err
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

// checkFinding is one finding of check: a line of its text report, an
// element of its JSON findings.
type checkFinding struct {
	Level   string `json:"level"` // ok, fail, warn, note or info
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"` // what to do about it
}

// checkReport is what check found; OK is false when any finding failed.
type checkReport struct {
	OK       bool           `json:"ok"`
	Findings []checkFinding `json:"findings"`
	secrets  []string
}

func (r *checkReport) add(level, fix, format string, args ...any) {
	msg := redact.String(fmt.Sprintf(format, args...), r.secrets...)
	r.Findings = append(r.Findings, checkFinding{Level: level, Message: msg, Fix: redact.String(fix, r.secrets...)})
	if level == "fail" {
		r.OK = false
	}
}

func (r *checkReport) pass(format string, args ...any) { r.add("ok", "", format, args...) }

func (r *checkReport) fail(fix, format string, args ...any) { r.add("fail", fix, format, args...) }

// printText writes one finding a line, marked, with its fix below it.
func (r *checkReport) printText(w io.Writer) error {
	for _, f := range r.Findings {
		mark := f.Level
		if mark == "fail" {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "%-4s  %s\n", mark, f.Message)
		if f.Fix != "" {
			fmt.Fprintf(w, "      fix: %s\n", f.Fix)
		}
	}
	return nil
}

// check reads the configuration, the database and table, and every
// destination, and reports what it found. Only a missing --config is an
// error; a configuration that does not load is a failed finding.
func check(ctx context.Context, g *globalFlags) (*checkReport, error) {
	rep := &checkReport{OK: true, Findings: []checkFinding{}}
	cfg, err := loadConfig(g)
	var ue usageError
	switch {
	case errors.As(err, &ue):
		return nil, err
	case err != nil:
		rep.fail("", "%v", err)
		return rep, nil
	}
	rep.secrets = cfg.Secrets()
	rep.pass("config %s: %d destinations, %d routes", g.config, len(cfg.Destinations), len(cfg.Routes))
	for _, warn := range cfg.Warnings() {
		rep.add("warn", "", "%s", warn)
	}
	checkDatabase(ctx, rep, cfg)
	checkDestinations(ctx, rep, g, cfg)
	checkInbox(ctx, rep, cfg)
	return rep, nil
}

// checkDatabase connects and checks the table as the relay would use it.
func checkDatabase(ctx context.Context, rep *checkReport, cfg *config.Config) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	db, err := openDialect(cctx, cfg)
	var se *schemaError
	if errors.As(err, &se) {
		// The table cannot be relayed as configured: say how and why.
		rep.pass("database reachable")
		rep.plan(&se.plan)
		rep.schema(se.table, dialect.SchemaReport{Problems: se.plan.Problems, Advice: se.plan.Advice})
		return
	}
	if err != nil {
		rep.fail("", "%s", err)
		return
	}
	defer db.Close()
	rep.pass("database %s reachable", db)
	rep.plan(db.plan)
	if sc, ok := db.Dialect.(dialect.SchemaChecker); ok {
		sr, err := sc.CheckSchema(cctx)
		switch {
		case err != nil:
			rep.fail("", "table %s: %s", cfg.Database.OutboxTable, err)
		case len(sr.Problems) == 0:
			rep.pass("table %s has every mapped column", sr.Table)
		}
		rep.schema(sr.Table, sr)
	}
	if pg, ok := postgresDialect(db.Dialect); ok {
		checkStateValues(cctx, rep, pg, cfg.Database.OutboxTable)
		if cfg.Relay.Notify.Channel != "" {
			checkNotifyTrigger(cctx, rep, pg, cfg.Relay.Notify.Channel, cfg.Relay.Notify.CreateTrigger)
		}
	}
}

// schema adds the problems (failed), advice (notes) and warnings of a
// table's schema check.
func (r *checkReport) schema(table string, sr dialect.SchemaReport) {
	for _, p := range sr.Problems {
		r.fail(p.Fix, "table %s: %s", table, p.What)
	}
	for _, a := range sr.Advice {
		r.add("note", a.Fix, "table %s: %s", table, a.What)
	}
	for _, a := range sr.Warnings {
		r.add("warn", a.Fix, "table %s: %s", table, a.What)
	}
}

// plan adds the claim mode (ok), the absent columns (info) and the table's
// risks (warn).
func (r *checkReport) plan(p *postgres.TablePlan) {
	mode, notes := describePlan(p)
	if mode == "" || p.Mode == "" {
		return
	}
	r.pass("%s", mode)
	for _, n := range notes {
		r.add("info", "", "%s", n)
	}
	for _, n := range p.Warnings {
		r.add("warn", "", "%s", n)
	}
}

// streamCreator is implemented by destinations that found, without
// changing anything, a stream that `run` will create (JetStream with
// createStream: true).
type streamCreator interface {
	StreamToCreate() string
}

// checkDestinations opens every destination without changing anything on
// its server and checks that it answers.
func checkDestinations(ctx context.Context, rep *checkReport, g *globalFlags, cfg *config.Config) {
	names := make([]string, 0, len(cfg.Destinations))
	for n := range cfg.Destinations {
		names = append(names, n)
	}
	sort.Strings(names)
	log, _ := newLogger(io.Discard, g, cfg)
	for _, name := range names {
		d := cfg.Destinations[name]
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		dest, err := openDestinationFor(dctx, name, d, cfg, log, nil, true)
		var warning, create string
		if err == nil {
			if c, ok := dest.(destination.Checker); ok {
				err = c.Check(dctx)
			}
			if s, ok := dest.(streamWarner); ok && err == nil {
				warning = s.StreamWarning(dctx)
			}
			if s, ok := dest.(streamCreator); ok {
				create = s.StreamToCreate()
			}
			_ = dest.Close()
		}
		cancel()
		if err != nil {
			rep.fail("", "destination %s (%s): %s", name, d.Type, err)
		} else {
			rep.pass("destination %s (%s) reachable", name, d.Type)
		}
		if create != "" {
			rep.add("note", "", "destination %s (%s): stream %s is missing; run will create it (createStream: true)", name, d.Type, create)
		}
		if warning != "" {
			rep.add("warn", "", "%s", warning)
		}
	}
}

// checkNotifyTrigger reports the wake-on-commit trigger of relay.notify:
// one that notifies another channel never wakes the relay, and one of an
// earlier release (a NOTIFY on every insert) serialises the producers'
// commits.
func checkNotifyTrigger(ctx context.Context, rep *checkReport, pg *postgres.Dialect, channel string, create bool) {
	t, err := pg.NotifyTriggerState(ctx)
	switch {
	case err != nil:
		rep.fail("", "relay.notify: %s", err)
	case !t.Installed && create:
		rep.pass("relay.notify: trigger %s not installed yet; a relay installs it at start (createTrigger)", t.Name)
	case !t.Installed:
		rep.add("note", "gate it as in docs/producing.md (Notify), or set relay.notify.createTrigger: true",
			"relay.notify: no trigger %s on the table: the application sends NOTIFY %s itself", t.Name, channel)
	case create && (t.Channel != channel || !t.Gated):
		rep.pass("relay.notify: trigger %s (channel %q, gated %v) is replaced at the next relay start (createTrigger)", t.Name, t.Channel, t.Gated)
	case t.Channel != channel:
		rep.fail(fmt.Sprintf("set relay.notify.channel: %q, or relay.notify.createTrigger: true to replace the trigger's function", t.Channel),
			"relay.notify: trigger %s notifies channel %q, but the relay listens on %q: inserts never wake it", t.Name, t.Channel, channel)
	case !t.Gated:
		rep.add("warn", "start a relay once with relay.notify.createTrigger: true; it replaces the function (docs/operations.md, upgrading)",
			"relay.notify: trigger %s notifies on every insert (an earlier release's): each inserting commit waits for the one before it", t.Name)
	default:
		rep.pass("relay.notify: trigger %s notifies %q while a relay sleeps", t.Name, channel)
	}
}

// checkStateValues warns about rows whose state value no state of
// database.states names: nothing would ever claim or count them.
func checkStateValues(ctx context.Context, rep *checkReport, pg *postgres.Dialect, table string) {
	const within = 5 * time.Second
	values, ok, err := pg.UnmappedStates(ctx, within)
	switch {
	case err != nil:
		rep.add("warn", "", "table %s: could not read the state values: %v", table, err)
	case !ok:
		rep.add("note", "", "table %s: too large (or locked) to compare every row's state with database.states within %s; if rows do not move, compare SELECT <state column>, count(*) … GROUP BY 1 with the mapping", table, within)
	}
	for _, v := range values {
		value := strconv.Quote(v.Value)
		if v.Null {
			value = "NULL"
		}
		rep.add("warn", "", "table %s: %d rows have state %s, which no state of database.states names: nothing claims or counts them (a typo in database.states, or a value of the application's own: map it, or set those rows to a mapped one)", table, v.Rows, value)
	}
}
