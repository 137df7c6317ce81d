package sqlserver

import (
	"context"
	"fmt"
)

// DatabaseSettings are the database options the dialect depends on.
type DatabaseSettings struct {
	// ReadCommittedSnapshot is READ_COMMITTED_SNAPSHOT: ON lets the claim's
	// head-of-key probe read committed versions without waiting on locks.
	ReadCommittedSnapshot bool
	// CompatibilityLevel must be 130 or higher for OPENJSON.
	CompatibilityLevel int
}

// Problems lists what is wrong (errors) or unadvisable (warnings) about s,
// for `queuebox check`.
func (s DatabaseSettings) Problems() (errs, warnings []string) {
	if s.CompatibilityLevel < 130 {
		errs = append(errs, fmt.Sprintf("database compatibility level %d is below 130: OPENJSON, which the relay's writes use, is unavailable "+
			"(ALTER DATABASE CURRENT SET COMPATIBILITY_LEVEL = 150)", s.CompatibilityLevel))
	}
	if !s.ReadCommittedSnapshot {
		warnings = append(warnings, "READ_COMMITTED_SNAPSHOT is OFF: claims may wait on producers' open transactions and concurrent claimers "+
			"can deadlock (retried); ALTER DATABASE CURRENT SET READ_COMMITTED_SNAPSHOT ON is recommended (docs/sqlserver.md)")
	}
	return errs, warnings
}

// DatabaseSettings reads the settings of the database the pool connects to.
func (d *Dialect) DatabaseSettings(ctx context.Context) (DatabaseSettings, error) {
	var s DatabaseSettings
	err := d.db.QueryRowContext(ctx, `SELECT is_read_committed_snapshot_on, CONVERT(INT, compatibility_level)
FROM sys.databases WHERE database_id = DB_ID()`).Scan(&s.ReadCommittedSnapshot, &s.CompatibilityLevel)
	if err != nil {
		return s, interpretError("database settings", err)
	}
	return s, nil
}
