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

func TestUnbundled(t *testing.T) {
	if _, err := migrations.FS("sqlserver"); err == nil || !strings.Contains(err.Error(), "sqlserver migrations are not bundled yet") {
		t.Errorf("sqlserver: %v", err)
	}
	if _, err := migrations.NewProvider("mysql", nil); err == nil {
		t.Error("mysql accepted")
	}
}
