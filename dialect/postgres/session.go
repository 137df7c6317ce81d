package postgres

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// PlanEachExecution sets PostgreSQL's plan_cache_mode = force_custom_plan
// on the connections made with cc, unless cc already sets plan_cache_mode
// (in its runtime parameters or its options). The relay opens its pool with
// it. A setting sent by the client outranks
// ALTER ROLE, ALTER DATABASE and postgresql.conf, so the connection string
// is the place to choose otherwise. Statements without parameters keep
// their first plan whatever plan_cache_mode says; the lock-mode claim,
// which has none, is therefore run unprepared.
//
// By default, after five executions of a prepared statement PostgreSQL may
// keep one generic plan for it, costed for the table's size at that moment,
// and re-plans only when something invalidates it (an ANALYZE, a VACUUM
// that updates the table's statistics, a schema change). An outbox swings
// between empty and a large backlog: a relay that polled an empty table
// keeps the plans it made for an empty table, sequential scans included,
// after a burst has filled it. For the claim such a plan is quadratic —
// each candidate scans the table for an earlier row of its key — and one
// claim of 100 rows took 246 s on 60,000 rows. With custom plans every
// execution is planned for the table as it is; the price is the planning,
// about 0.3 ms per claim and 0.08 ms per completion.
func PlanEachExecution(cc *pgx.ConnConfig) {
	setUnlessChosen(cc, "plan_cache_mode", "force_custom_plan")
}

// NoJIT sets PostgreSQL's jit = off on the connections made with cc, unless
// cc already sets jit (in its runtime parameters or its options). The relay
// opens its pool with it. PostgreSQL
// compiles a statement whose estimated cost is above jit_above_cost
// (100,000 by default) at every execution, and keeps nothing of it for the
// next: a claim of 10,000 keyed rows is estimated at about 185,000, so with
// JIT on each such claim compiled 40 functions first and took 250 ms
// instead of 200. The relay's statements are short and run again and
// again, which is the case JIT does not pay for; the estimates grow with the
// batch size, so smaller claims stay under the threshold either way.
func NoJIT(cc *pgx.ConnConfig) { setUnlessChosen(cc, "jit", "off") }

// NoBitmapScans sets PostgreSQL's enable_bitmapscan = off on the connections
// made with cc, unless cc already sets it. The relay opens its pool with it.
// A claim reads its window through the claim index in sequence order and
// stops once it holds enough heads. Past the front of the table its window
// is a range between two given sequences, and the planner, estimating the
// pending rows of that range from a histogram of the whole table (mostly
// finished rows), expects a handful and prefers a bitmap scan of the whole
// window and a sort: every row of the window read and tested for head of
// its key before the first is locked. The relay's other statements reach
// their rows by primary key or through small partial indexes, where a
// plain index scan does as well.
func NoBitmapScans(cc *pgx.ConnConfig) { setUnlessChosen(cc, "enable_bitmapscan", "off") }

// setUnlessChosen sets the startup parameter name to value unless cc
// already chooses a value for it.
func setUnlessChosen(cc *pgx.ConnConfig, name, value string) {
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	if _, chosen := chosenSetting(cc, name); chosen {
		return
	}
	cc.RuntimeParams[name] = value
}

// PlanCacheNote returns a note for `check` and the start log when the
// connection settings choose a plan_cache_mode other than the one
// PlanEachExecution would set, and "" otherwise.
func PlanCacheNote(cc *pgx.ConnConfig) string {
	mode, chosen := chosenSetting(cc, "plan_cache_mode")
	if !chosen || mode == "force_custom_plan" {
		return ""
	}
	return fmt.Sprintf("the connection settings (database.url or PGOPTIONS) set plan_cache_mode = %s, and the relay keeps it: a plan PostgreSQL made while the table was empty may then be kept after it fills, and a claim on a large backlog can take seconds to minutes; leave plan_cache_mode out to have every execution planned", mode)
}

// chosenSetting reports whether cc sets the setting name (lower case, with
// underscores), and to what, the way the server reads it: a startup
// parameter of that name (any case) outranks options, where the last of -c
// name=value, -cname=value and --name=value wins, with dashes in the name
// read as underscores.
func chosenSetting(cc *pgx.ConnConfig, name string) (value string, chosen bool) {
	for k, v := range cc.RuntimeParams {
		if normalizeSetting(k) == name {
			return strings.ToLower(v), true
		}
	}
	fields := strings.Fields(cc.RuntimeParams["options"])
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		switch {
		case f == "-c" && i+1 < len(fields):
			i++
			f = fields[i]
		case strings.HasPrefix(f, "-c"):
			f = f[2:]
		case strings.HasPrefix(f, "--"):
			f = f[2:]
		default:
			continue
		}
		if k, v, ok := strings.Cut(f, "="); ok && normalizeSetting(k) == name {
			value, chosen = strings.ToLower(v), true
		}
	}
	return value, chosen
}

func normalizeSetting(s string) string {
	return strings.ReplaceAll(strings.ToLower(s), "-", "_")
}
