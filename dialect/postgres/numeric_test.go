package postgres

import "testing"

// TestNumericLiteral: the replay check of a numeric id accepts what
// PostgreSQL 15's numeric input does, and refuses what it refuses (each
// case checked with psql), so that a bad id exits 2, not with a cast error.
func TestNumericLiteral(t *testing.T) {
	for _, ok := range []string{"1", "-1.5", ".5", "1e10", "1.5E-3", " 42 ", "NaN", "Infinity", "-inf"} {
		if !numericLiteral.MatchString(ok) {
			t.Errorf("%q rejected", ok)
		}
	}
	for _, bad := range []string{"1/2", "0x10", "0b101", "1_000", "", "abc", "1e", "--1"} {
		if numericLiteral.MatchString(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
}
