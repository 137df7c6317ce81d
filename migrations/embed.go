// Package migrations bundles the goose migrations that create the outbox
// table, one folder per database type, embedded in the binary.
package migrations

import (
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
)

// bundled holds every dialect's migrations. Adding SQL Server is one more
// pattern here and one entry in dialects.
//
//go:embed postgresql/*.sql sqlserver/*.sql
var bundled embed.FS

// dialects maps a config database.type to its folder in bundled and its
// goose dialect.
var dialects = map[string]bundle{
	"postgresql": {dir: "postgresql", goose: goose.DialectPostgres},
	"sqlserver":  {dir: "sqlserver", goose: goose.DialectMSSQL},
}

// FS returns the migrations of dbType ("postgresql" or "sqlserver"), rooted at the folder
// so that goose sees the .sql files at the top level.
func FS(dbType string) (fs.FS, error) {
	d, err := lookup(dbType)
	if err != nil {
		return nil, err
	}
	return fs.Sub(bundled, d.dir)
}

// NewProvider returns a goose provider that applies the migrations of dbType
// to db. The migrations use the unqualified table name outbox: connect db
// with the target schema first on its search_path (PostgreSQL) or as a user
// whose default schema is the target schema (SQL Server).
func NewProvider(dbType string, db *sql.DB, opts ...goose.ProviderOption) (*goose.Provider, error) {
	d, err := lookup(dbType)
	if err != nil {
		return nil, err
	}
	fsys, err := fs.Sub(bundled, d.dir)
	if err != nil {
		return nil, err
	}
	return goose.NewProvider(d.goose, db, fsys, opts...)
}

type bundle struct {
	dir   string        // folder in bundled
	goose goose.Dialect // goose's name for the database
}

func lookup(dbType string) (bundle, error) {
	d, ok := dialects[dbType]
	if ok {
		return d, nil
	}
	return d, fmt.Errorf("migrations: unknown database type %q (want postgresql or sqlserver)", dbType)
}
