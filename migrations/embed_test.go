package migrations_test

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/queuebox/queuebox/migrations"
)

func TestFS(t *testing.T) {
	fsys, err := migrations.FS("postgresql")
	if err != nil {
		t.Fatal(err)
	}
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("no postgresql migrations at the root of FS: %v %v", names, err)
	}
	b, err := fs.ReadFile(fsys, names[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-- +goose Up", "-- +goose Down", "CREATE TABLE outbox"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %q", names[0], want)
		}
	}
}

func TestSQLServerFS(t *testing.T) {
	fsys, err := migrations.FS("sqlserver")
	if err != nil {
		t.Fatal(err)
	}
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil || len(names) != 1 || names[0] != "00001_create_outbox.sql" {
		t.Fatalf("sqlserver migrations at the root of FS: %v %v", names, err)
	}
	b, err := fs.ReadFile(fsys, names[0])
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	for _, want := range []string{
		"-- +goose Up", "-- +goose Down", "CREATE TABLE outbox", "CREATE SEQUENCE outbox_sequence_seq",
		"[key]            NVARCHAR(255)", "UNIQUEIDENTIFIER", "DEFAULT NEWID()", "DEFAULT N'{}'", "DEFAULT N'pending'",
		"NEXT VALUE FOR outbox_sequence_seq", "DEFAULT SYSUTCDATETIME()", "WHERE state = N'pending'",
		"WHERE state IN (N'pending', N'processing')", "WHERE state = N'processing'",
	} {
		if !strings.Contains(src, want) {
			t.Errorf("%s lacks %q", names[0], want)
		}
	}
	// Times are UTC from the database clock only, and the
	// reserved word key is always bracketed.
	code := stripComments(src)
	for _, bad := range []string{"GETDATE", "SYSDATETIME()", "CURRENT_TIMESTAMP", "now()", " key ", "(key", "key)"} {
		if strings.Contains(code, bad) {
			t.Errorf("%s contains %q outside comments", names[0], bad)
		}
	}
	p, err := migrations.NewProvider("sqlserver", nil)
	if err == nil || p != nil {
		// goose refuses a nil *sql.DB; the point is that the dialect is known.
		t.Logf("NewProvider with a nil db: %v", err)
	}
	if err != nil && strings.Contains(err.Error(), "unknown database type") {
		t.Errorf("sqlserver not bundled: %v", err)
	}
}

func stripComments(src string) string {
	var b strings.Builder
	for _, line := range strings.Split(src, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

func TestUnknownType(t *testing.T) {
	if _, err := migrations.NewProvider("mysql", nil); err == nil {
		t.Error("mysql accepted")
	}
	if _, err := migrations.FS("mssql"); err == nil || !strings.Contains(err.Error(), "want postgresql or sqlserver") {
		t.Errorf("mssql: %v", err)
	}
}
