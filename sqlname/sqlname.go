// Package sqlname quotes the names and constants that queuebox writes into
// SQL, for PostgreSQL and SQL Server, and holds the one constant that the
// producers and the PostgreSQL dialect must agree on: the class of the
// advisory lock that gates NOTIFY (wake on commit). It is a leaf package,
// standard library only, so that the producer package and the dialects
// share it without importing one another.
package sqlname

import "strings"

// Postgres quotes one identifier part for PostgreSQL: "x", with embedded
// double quotes doubled.
func Postgres(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// SQLServer quotes one identifier part for SQL Server: [x], with embedded
// closing brackets doubled.
func SQLServer(s string) string { return "[" + strings.ReplaceAll(s, "]", "]]") + "]" }

// Literal quotes a string constant: 'x', with embedded single quotes
// doubled (PostgreSQL with standard_conforming_strings on, as in every
// supported version, and SQL Server). SQL Server's Unicode constants take
// an N before it.
func Literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// NotifyLockClass is the first key of the advisory lock that gates NOTIFY
// on PostgreSQL (the second is hashtext(channel)): producers notify only
// while a relay holds or waits for it. 0x7162, "qb".
const NotifyLockClass = 0x7162
