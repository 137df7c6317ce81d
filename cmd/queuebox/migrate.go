package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/spf13/cobra"

	"github.com/queuebox/queuebox/config"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/migrations"
)

func newMigrateCmd(g *globalFlags) *cobra.Command {
	var dbType string
	cmd := &cobra.Command{
		Use:   "migrate [up|status|sql]",
		Short: "Apply, show or print the bundled migrations of the outbox table",
		Long: `migrate applies (up, the default), shows (status) or prints (sql) the bundled
goose migrations for the configured database type. They create the table
"outbox" of the contract; when database.outboxTable is schema-qualified
(e.g. events.outbox) the schema is created if needed and the table goes there.

migrate refuses to run on a mapped table (database.columns, database.states,
or a table not named outbox): that table already exists, and migrating would
create a second one. Use 'queuebox check' to see what it lacks.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("migrate takes at most one argument (up, status or sql), got %q", args)
			}
			if len(args) == 1 && args[0] != "up" && args[0] != "status" && args[0] != "sql" {
				return usagef("migrate: unknown action %q (want up, status or sql)", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			action := "up"
			if len(args) == 1 {
				action = args[0]
			}
			if action == "sql" {
				t := dbType
				if t == "" && g.config != "" {
					cfg, err := loadConfig(g)
					if err != nil {
						return err
					}
					t = cfg.Database.Type
				}
				if t == "" {
					t = "postgresql"
				}
				if t != "postgresql" && t != "sqlserver" {
					return usagef("migrate sql: --type %q: want postgresql or sqlserver", t)
				}
				return printMigrations(cmd.OutOrStdout(), t)
			}
			cfg, err := loadConfig(g)
			if err != nil {
				return err
			}
			return migrate(cmd.Context(), cmd.OutOrStdout(), cfg, action)
		},
	}
	cmd.Flags().StringVar(&dbType, "type", "", "database type for 'migrate sql' without a config (postgresql or sqlserver)")
	return cmd
}

// printMigrations writes the up part of every bundled migration of dbType,
// in order: a script that psql (or sqlcmd) can run as it is. The down
// parts are left out: goose's markers are comments to any other client,
// and with them the script created the table, then dropped it.
func printMigrations(w io.Writer, dbType string) error {
	fsys, err := migrations.FS(dbType)
	if err != nil {
		return err
	}
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "-- queuebox: the up migrations of the bundled %s table, in order.\n"+
		"-- Run them in autocommit (psql without --single-transaction): some build\n"+
		"-- indexes CONCURRENTLY. goose_db_version is not written: 'queuebox migrate'\n"+
		"-- on this database later would apply them again.\n", dbType)
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return err
		}
		up, err := upSection(string(b))
		if err != nil {
			return fmt.Errorf("migration %s: %w", n, err)
		}
		fmt.Fprintf(w, "\n-- %s\n%s\n", n, strings.TrimRight(up, "\n"))
	}
	return nil
}

// upSection is a goose SQL migration without its -- +goose Down part: the
// header comments, the annotations and the up statements.
func upSection(src string) (string, error) {
	var b strings.Builder
	up := false
	for line := range strings.Lines(src) {
		switch strings.TrimSpace(line) {
		case "-- +goose Up":
			up = true
		case "-- +goose Down":
			if !up {
				return "", errors.New("-- +goose Down before -- +goose Up")
			}
			return b.String(), nil
		}
		b.WriteString(line)
	}
	if !up {
		return "", errors.New("no -- +goose Up annotation")
	}
	return b.String(), nil
}

// migrationTarget checks that the configured table is one migrate may
// create and returns its schema ("" for the connection's default).
func migrationTarget(cfg *config.Config) (string, error) {
	m, err := dialect.NewMapping(cfg.Database.OutboxTable, cfg.Database.Columns, cfg.Database.States)
	if err != nil {
		return "", fmt.Errorf("database: %w", err)
	}
	if m.TableName() != dialect.DefaultTable || len(cfg.Database.Columns) > 0 || len(cfg.Database.States) > 0 {
		return "", fmt.Errorf("migrate creates the bundled table %q, but the config maps an existing table (%s): migrating would create a second table. "+
			"Run 'queuebox check' to see what the mapped table lacks, or remove database.columns/states and set database.outboxTable to outbox or <schema>.outbox",
			dialect.DefaultTable, cfg.Database.OutboxTable)
	}
	return m.Schema(), nil
}

func migrate(ctx context.Context, w io.Writer, cfg *config.Config, action string) error {
	schema, err := migrationTarget(cfg)
	if err != nil {
		return err
	}
	if cfg.Database.Type == "sqlserver" {
		if schema != "" && schema != "dbo" {
			return fmt.Errorf("migrate: on SQL Server the bundled table goes into the login's default schema; database.outboxTable %q names schema %q (create it with 'queuebox migrate sql --type sqlserver' instead)", cfg.Database.OutboxTable, schema)
		}
		db, _, err := openSQLServer(ctx, cfg)
		if err != nil {
			return err
		}
		defer db.Close()
		p, err := migrations.NewProvider("sqlserver", db)
		if err != nil {
			return err
		}
		tracked := true
		if action == "status" {
			// As on PostgreSQL: status writes nothing (not run here: no
			// SQL Server on the machine that wrote it).
			if err := db.QueryRowContext(ctx, "SELECT CASE WHEN OBJECT_ID(N'goose_db_version', N'U') IS NULL THEN 0 ELSE 1 END").Scan(&tracked); err != nil {
				return fmt.Errorf("migrate status: %w", err)
			}
		}
		return runMigrations(ctx, w, p, action, tracked)
	}
	pool, err := openPostgres(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	cc := pool.Config().ConnConfig.Copy()
	if schema != "" {
		if action == "up" {
			if _, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
				return fmt.Errorf("migrate: creating schema %q: %w", schema, err)
			}
		}
		cc.RuntimeParams["search_path"] = schema
	}
	// status writes nothing: goose would create its version table (and
	// fail when the schema does not exist yet). Without the table nothing
	// is applied.
	tracked := true
	if action == "status" {
		table := "goose_db_version"
		if schema != "" {
			table = pgx.Identifier{schema, table}.Sanitize()
		}
		if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&tracked); err != nil {
			return fmt.Errorf("migrate status: %w", err)
		}
	}
	db := stdlib.OpenDB(*cc)
	defer db.Close()
	p, err := migrations.NewProvider("postgresql", db)
	if err != nil {
		return err
	}
	return runMigrations(ctx, w, p, action, tracked)
}

// runMigrations applies (up) or lists (status) the provider's migrations.
// tracked says that goose's version table exists; when it does not, status
// lists every migration as pending without asking goose, which would
// create the table.
func runMigrations(ctx context.Context, w io.Writer, p *goose.Provider, action string, tracked bool) error {
	switch action {
	case "status":
		var st []*goose.MigrationStatus
		if tracked {
			var err error
			if st, err = p.Status(ctx); err != nil {
				return fmt.Errorf("migrate status: %w", err)
			}
		} else {
			for _, src := range p.ListSources() {
				st = append(st, &goose.MigrationStatus{Source: src, State: goose.StatePending})
			}
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tSTATE\tAPPLIED AT\tFILE")
		for _, s := range st {
			at := "-"
			if !s.AppliedAt.IsZero() {
				at = s.AppliedAt.UTC().Format("2006-01-02 15:04:05Z")
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", s.Source.Version, s.State, at, s.Source.Path)
		}
		return tw.Flush()
	default:
		res, err := p.Up(ctx)
		if err != nil {
			return fmt.Errorf("migrate up: %w", err)
		}
		if len(res) == 0 {
			fmt.Fprintln(w, "migrate: already up to date")
		}
		for _, r := range res {
			fmt.Fprintf(w, "migrate: applied %s (%s)\n", r.Source.Path, r.Duration.Round(1e6))
		}
		return nil
	}
}
