package migrations

import (
	"database/sql"
	"embed"
	"io/fs"

	"github.com/pressly/goose/v3"
)

// InboxVersionTable is goose's version table for the inbox migrations,
// apart from the outbox's, so that the inbox table is created only where
// the receiving service is configured.
const InboxVersionTable = "goose_inbox_version"

//go:embed inbox/postgresql/*.sql inbox/sqlserver/*.sql
var inboxBundled embed.FS

// InboxFS returns the migrations of the inbox table (docs/inbox.md) for
// dbType ("postgresql" or "sqlserver"), rooted at the folder.
func InboxFS(dbType string) (fs.FS, error) {
	d, err := lookup(dbType)
	if err != nil {
		return nil, err
	}
	return fs.Sub(inboxBundled, "inbox/"+d.dir)
}

// NewInboxProvider returns a goose provider that applies the inbox
// migrations of dbType to db, recorded in InboxVersionTable. Like
// NewProvider, the table name is unqualified: connect db with the target
// schema first.
func NewInboxProvider(dbType string, db *sql.DB, opts ...goose.ProviderOption) (*goose.Provider, error) {
	d, err := lookup(dbType)
	if err != nil {
		return nil, err
	}
	fsys, err := InboxFS(dbType)
	if err != nil {
		return nil, err
	}
	opts = append([]goose.ProviderOption{goose.WithTableName(InboxVersionTable), goose.WithDisableGlobalRegistry(true)}, opts...)
	return goose.NewProvider(d.goose, db, fsys, opts...)
}
