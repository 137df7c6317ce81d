package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/address"
	"github.com/queuebox/queuebox/config"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/dialect/postgres"
)

// schemaError is openDialect's error when the table cannot be relayed as
// configured: each problem names the column and the fix.
type schemaError struct {
	table string
	plan  postgres.TablePlan
}

func (e *schemaError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "table %s cannot be relayed as configured:", e.table)
	for _, p := range e.plan.Problems {
		fmt.Fprintf(&b, "\n  - %s\n    fix: %s", p.What, p.Fix)
	}
	return b.String()
}

// openPostgresDialect reads the table from the catalog (postgres.ResolveTable),
// drops the optional columns it lacks from the mapping, picks the claim mode
// (relay.claimMode) and builds the lease-mode or the lock-mode dialect.
func openPostgresDialect(ctx context.Context, pool *pgxpool.Pool, m dialect.Mapping, cfg *config.Config) (dialect.Dialect, *postgres.TablePlan, error) {
	hold := cfg.Relay.OnDead == "hold"
	plan, err := postgres.ResolveTable(ctx, pool, m, cfg.Relay.ClaimMode, hold)
	if err != nil {
		return nil, nil, fmt.Errorf("database: %w", err)
	}
	if len(plan.Problems) == 0 && !plan.Mapping.Has(dialect.ColAggregateType) {
		if uses := routesUsingAggregateType(cfg); len(uses) > 0 {
			plan.Problems = append(plan.Problems, dialect.SchemaProblem{Column: dialect.ColAggregateType,
				What: fmt.Sprintf("the table has no aggregateType column, but %s use {{ aggregateType }}", strings.Join(uses, ", ")),
				Fix:  "map database.columns.aggregateType to a column, or change those templates"})
		}
	}
	if note := postgres.PlanCacheNote(pool.Config().ConnConfig); note != "" {
		plan.Notes = append(plan.Notes, note)
	}
	if len(plan.Problems) > 0 {
		return nil, &plan, &schemaError{table: m.Table(func(s string) string { return s }), plan: plan}
	}
	opts := []postgres.Option{postgres.WithHoldDeadKeys(hold), postgres.WithIDType(plan.IDType), postgres.WithUniqueID(plan.IDUnique), postgres.WithLastErrorLength(plan.LastErrorLen),
		postgres.WithTableClaimTurns(cfg.Relay.ClaimTurns != "replica")}
	if plan.Mode == postgres.ModeBuckets {
		d, err := postgres.NewBucketMode(pool, plan.Mapping, cfg.Relay.Lease.D(), opts...)
		if err != nil {
			return nil, &plan, fmt.Errorf("database: %w", err)
		}
		return d, &plan, nil
	}
	if plan.Mode == postgres.ModeLock {
		lockTimeout := cfg.Relay.LockTimeout.D()
		if lockTimeout == 0 {
			lockTimeout = cfg.Relay.Lease.D()
		}
		d, err := postgres.NewLockMode(pool, plan.Mapping, lockTimeout, opts...)
		if err != nil {
			return nil, &plan, fmt.Errorf("database: %w", err)
		}
		return d, &plan, nil
	}
	d, err := postgres.New(pool, plan.Mapping, opts...)
	if err != nil {
		return nil, &plan, fmt.Errorf("database: %w", err)
	}
	return d, &plan, nil
}

// routesUsingAggregateType names the destinations whose address templates
// use {{ aggregateType }}.
func routesUsingAggregateType(cfg *config.Config) []string {
	var out []string
	for name, d := range cfg.Destinations {
		for _, src := range []string{d.AddressTemplate(), d.Key, d.RoutingKey} {
			t, err := address.ParseTemplate(src)
			if src != "" && err == nil && t.Uses("aggregateType") {
				out = append(out, "destinations."+name)
				break
			}
		}
	}
	return out
}

// describePlan writes how the table will be used, for `check` and the
// start log.
func describePlan(p *postgres.TablePlan) (mode string, notes []string) {
	if p == nil {
		return "", nil
	}
	return fmt.Sprintf("claim mode %s (%s)", p.Mode, p.Why), p.Notes
}
