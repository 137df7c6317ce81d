package postgres

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// PlanEachExecution sets PostgreSQL's plan_cache_mode = force_custom_plan
// on the connections made with cc, unless cc already sets plan_cache_mode
// (in its runtime parameters or its options). The relay opens its pool with
// it (docs/performance.md, lesson 21). A setting sent by the client outranks
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
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	if _, chosen := chosenPlanCacheMode(cc); chosen {
		return
	}
	cc.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
}

// PlanCacheNote returns a note for `check` and the start log when the
// connection string chooses a plan_cache_mode other than the one
// PlanEachExecution would set, and "" otherwise.
func PlanCacheNote(cc *pgx.ConnConfig) string {
	mode, chosen := chosenPlanCacheMode(cc)
	if !chosen || mode == "force_custom_plan" {
		return ""
	}
	return fmt.Sprintf("database.url sets plan_cache_mode (%s), and the relay keeps it: a plan PostgreSQL made while the table was empty may then be kept after it fills, and a claim on a large backlog can take seconds to minutes (docs/performance.md, lesson 21); leave plan_cache_mode out of the URL to have every execution planned", mode)
}

// chosenPlanCacheMode reports whether cc sets plan_cache_mode, as a runtime
// parameter or as -c in options (which the server also reads with dashes
// for underscores), and to what.
func chosenPlanCacheMode(cc *pgx.ConnConfig) (mode string, chosen bool) {
	for k, v := range cc.RuntimeParams {
		if normalizeSetting(k) == "plan_cache_mode" {
			return strings.ToLower(v), true
		}
		if k != "options" {
			continue
		}
		opts := normalizeSetting(v)
		if i := strings.Index(opts, "plan_cache_mode"); i >= 0 {
			mode = strings.TrimLeft(opts[i+len("plan_cache_mode"):], " =")
			if j := strings.IndexAny(mode, " \t"); j >= 0 {
				mode = mode[:j]
			}
			return mode, true
		}
	}
	return "", false
}

func normalizeSetting(s string) string {
	return strings.ReplaceAll(strings.ToLower(s), "-", "_")
}
