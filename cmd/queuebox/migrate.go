package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/spf13/cobra"

	"github.com/queuebox/queuebox/config"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/migrations"
	"github.com/queuebox/queuebox/suggest"
)

func newMigrateCmd(g *globalFlags) *cobra.Command {
	var (
		dbType string
		output outputFormat
	)
	cmd := &cobra.Command{
		Use:   "migrate [up|status|sql]",
		Short: "Apply, show or print the bundled migrations of the outbox table",
		Long: `migrate applies (up, the default), shows (status) or prints (sql) the bundled
goose migrations for the configured database type. They create the table
"outbox" of the contract; when database.outboxTable is schema-qualified
(e.g. events.outbox) the schema is created if needed and the table goes there.
up shows its progress on stderr, one migration at a time.

migrate refuses to run on a mapped table (database.columns, database.states,
or a table not named outbox): that table already exists, and migrating would
create a second one. Use 'queuebox check' to see what it lacks.

-o json prints, for up, {"applied": [{"version", "file", "durationSeconds"}],
"version"}; for status, {"migrations": [{"version", "file", "state",
"appliedAt"}]}. sql prints SQL only.`,
		Args: migrateArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			action := "up"
			if len(args) == 1 {
				action = args[0]
			}
			if action == "sql" {
				if output.json() {
					return usagef("migrate sql prints SQL; -o json applies to up and status")
				}
				return migrateSQL(cmd.OutOrStdout(), g, dbType)
			}
			cfg, err := loadConfig(g)
			if err != nil {
				return err
			}
			prog := func(total int64) *progress { return newProgress(g, cmd.ErrOrStderr(), "migrate", "migrations", total) }
			res, err := migrate(cmd.Context(), cfg, action, prog)
			if err != nil {
				return err
			}
			if err := migrateInbox(cmd.Context(), cfg, action, prog, res); err != nil {
				return err
			}
			if output.json() {
				return printJSON(cmd.OutOrStdout(), res.json(action))
			}
			return res.print(cmd.OutOrStdout(), action)
		},
	}
	cmd.Flags().StringVar(&dbType, "type", "", "database type for 'migrate sql' without a config (postgresql or sqlserver)")
	addOutputFlag(cmd, &output)
	return cmd
}

// migrateActions are the actions migrate takes as its argument.
var migrateActions = []string{"up", "status", "sql"}

func migrateArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 1 {
		return usagef("migrate takes at most one argument (up, status or sql), got %q", args)
	}
	if len(args) == 1 && !slices.Contains(migrateActions, args[0]) {
		return usagef("migrate: unknown action %q (want up, status or sql)%s", args[0], suggest.DidYouMean(args[0], migrateActions))
	}
	return nil
}

// migrateSQL is `migrate sql`: the type from --type, else the config's,
// else postgresql.
func migrateSQL(w io.Writer, g *globalFlags, dbType string) error {
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
	return printMigrations(w, t)
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

// migrateResult is what migrate did: the state of every migration
// (status), or those it applied and the database's version after (up).
type migrateResult struct {
	status  []*goose.MigrationStatus
	applied []*goose.MigrationResult
	version int64
}

// newMigrateProgress starts the progress of applying total migrations;
// nil shows none.
type newMigrateProgress func(total int64) *progress

func migrate(ctx context.Context, cfg *config.Config, action string, prog newMigrateProgress) (*migrateResult, error) {
	schema, err := migrationTarget(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Database.Type == "sqlserver" {
		return migrateSQLServer(ctx, cfg, schema, action, prog)
	}
	pool, err := openPostgres(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	cc := pool.Config().ConnConfig.Copy()
	if schema != "" {
		if action == "up" {
			if _, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
				return nil, fmt.Errorf("migrate: creating schema %q: %w", schema, err)
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
			return nil, fmt.Errorf("migrate status: %w", err)
		}
	}
	db := stdlib.OpenDB(*cc)
	defer db.Close()
	p, err := migrations.NewProvider("postgresql", db)
	if err != nil {
		return nil, err
	}
	return runMigrations(ctx, p, action, tracked, prog)
}

func migrateSQLServer(ctx context.Context, cfg *config.Config, schema, action string, prog newMigrateProgress) (*migrateResult, error) {
	if schema != "" && schema != "dbo" {
		return nil, fmt.Errorf("migrate: on SQL Server the bundled table goes into the login's default schema; database.outboxTable %q names schema %q (create it with 'queuebox migrate sql --type sqlserver' instead)", cfg.Database.OutboxTable, schema)
	}
	db, _, err := openSQLServer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	p, err := migrations.NewProvider("sqlserver", db)
	if err != nil {
		return nil, err
	}
	tracked := true
	if action == "status" {
		// As on PostgreSQL: status writes nothing.
		if err := db.QueryRowContext(ctx, "SELECT CASE WHEN OBJECT_ID(N'goose_db_version', N'U') IS NULL THEN 0 ELSE 1 END").Scan(&tracked); err != nil {
			return nil, fmt.Errorf("migrate status: %w", err)
		}
	}
	return runMigrations(ctx, p, action, tracked, prog)
}

// runMigrations applies (up) or lists (status) the provider's migrations.
// tracked says that goose's version table exists; when it does not, status
// lists every migration as pending without asking goose, which would
// create the table.
func runMigrations(ctx context.Context, p *goose.Provider, action string, tracked bool, prog newMigrateProgress) (*migrateResult, error) {
	res := &migrateResult{}
	if action == "status" {
		if !tracked {
			for _, src := range p.ListSources() {
				res.status = append(res.status, &goose.MigrationStatus{Source: src, State: goose.StatePending})
			}
			return res, nil
		}
		var err error
		if res.status, err = p.Status(ctx); err != nil {
			return nil, fmt.Errorf("migrate status: %w", err)
		}
		return res, nil
	}
	st, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate up: %w", err)
	}
	pending := int64(0)
	for _, s := range st {
		if s.State == goose.StatePending {
			pending++
		}
	}
	var pr *progress
	if prog != nil && pending > 0 {
		pr = prog(pending)
	}
	for {
		r, err := p.UpByOne(ctx)
		if errors.Is(err, goose.ErrNoNextVersion) {
			break
		}
		if err != nil {
			if pr != nil {
				pr.Finish()
			}
			return nil, fmt.Errorf("migrate up: %w", err)
		}
		res.applied = append(res.applied, r)
		if pr != nil {
			pr.Set(int64(len(res.applied)), max(pending, int64(len(res.applied))))
		}
	}
	if pr != nil {
		pr.Finish()
	}
	if res.version, err = p.GetDBVersion(ctx); err != nil {
		return nil, fmt.Errorf("migrate up: %w", err)
	}
	return res, nil
}

// migrationJSON is one migration of `migrate status -o json`.
type migrationJSON struct {
	Version   int64      `json:"version"`
	File      string     `json:"file"`
	State     string     `json:"state"`               // applied or pending
	AppliedAt *time.Time `json:"appliedAt,omitempty"` // absent while pending
}

// appliedJSON is one migration `migrate up -o json` applied.
type appliedJSON struct {
	Version         int64   `json:"version"`
	File            string  `json:"file"`
	DurationSeconds float64 `json:"durationSeconds"`
}

// migrateStatusJSON and migrateUpJSON are the documents of -o json.
type migrateStatusJSON struct {
	Migrations []migrationJSON `json:"migrations"`
}

type migrateUpJSON struct {
	Applied []appliedJSON `json:"applied"`
	Version int64         `json:"version"` // the database's version after
}

func (r *migrateResult) json(action string) any {
	if action == "status" {
		out := migrateStatusJSON{Migrations: []migrationJSON{}}
		for _, s := range r.status {
			m := migrationJSON{Version: s.Source.Version, File: s.Source.Path, State: string(s.State)}
			if !s.AppliedAt.IsZero() {
				at := s.AppliedAt.UTC()
				m.AppliedAt = &at
			}
			out.Migrations = append(out.Migrations, m)
		}
		return out
	}
	out := migrateUpJSON{Applied: []appliedJSON{}, Version: r.version}
	for _, a := range r.applied {
		out.Applied = append(out.Applied, appliedJSON{Version: a.Source.Version, File: a.Source.Path, DurationSeconds: a.Duration.Seconds()})
	}
	return out
}

func (r *migrateResult) print(w io.Writer, action string) error {
	if action == "status" {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tSTATE\tAPPLIED AT\tFILE")
		for _, s := range r.status {
			at := "-"
			if !s.AppliedAt.IsZero() {
				at = s.AppliedAt.UTC().Format("2006-01-02 15:04:05Z")
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", s.Source.Version, s.State, at, s.Source.Path)
		}
		return tw.Flush()
	}
	if len(r.applied) == 0 {
		_, err := fmt.Fprintln(w, "migrate: already up to date")
		return err
	}
	for _, a := range r.applied {
		if _, err := fmt.Fprintf(w, "migrate: applied %s (%s)\n", a.Source.Path, a.Duration.Round(time.Millisecond)); err != nil {
			return err
		}
	}
	return nil
}
