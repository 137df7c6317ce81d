// Package suggest finds the likely intended word for a misspelt one: a
// config key, a logical column name, a table's column. Every "did you
// mean" in queuebox's messages comes from here, so that they agree on what
// counts as a typo.
package suggest

import (
	"fmt"
	"strings"

	"github.com/agnivade/levenshtein"
)

// maxLen bounds the cost of a comparison: a string this long is not a
// typo of a short name, and the distance is quadratic in the lengths.
const maxLen = 256

// Closest returns the candidate closest to s when it is close enough to be
// a likely typo: equal but for case, or within an edit distance (ignoring
// case) of one for a name of up to 3 letters, else of about a third of its
// length, at least 2 (two letters swapped) and at most 3.
// Ties go to the earlier candidate.
func Closest(s string, candidates []string) (string, bool) {
	best, bestD := "", 1<<30
	ls := strings.ToLower(s)
	for _, c := range candidates {
		if strings.EqualFold(s, c) {
			return c, true
		}
		if len(s) > maxLen || len(c) > maxLen {
			continue
		}
		if d := levenshtein.ComputeDistance(ls, strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	limit := 1 // a short name: one edit
	if len(s) >= 4 {
		limit = min(3, max(2, len(s)/3)) // two edits at least: a swap of two letters
	}
	if best == "" || bestD > limit {
		return "", false
	}
	return best, true
}

// DidYouMean is Closest as a message suffix: ` (did you mean "x"?)`, or ""
// when no candidate is close.
func DidYouMean(s string, candidates []string) string {
	if c, ok := Closest(s, candidates); ok {
		return fmt.Sprintf(" (did you mean %q?)", c)
	}
	return ""
}
