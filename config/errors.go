package config

import (
	"fmt"
	"sort"
	"strings"
)

// Error is one problem in a configuration file. Path names the key, such
// as routes[2].destination; Line and Column (from 1) are 0 when the problem
// has no place in the file, such as a required section that is missing.
type Error struct {
	File   string
	Line   int
	Column int
	Path   string
	Msg    string
}

// Error formats e as "file:line:col: path: msg", leaving out what is
// unknown.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(":")
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, "%d:%d:", e.Line, e.Column)
	}
	if b.Len() > 0 {
		b.WriteString(" ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in a configuration file, in the order of
// their position in the file (problems without a position last). Parse and
// Load return it as their error; its text has one problem per line.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

func (es Errors) sort() {
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i], es[j]
		if (a.Line == 0) != (b.Line == 0) {
			return b.Line == 0
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Column != b.Column {
			return a.Column < b.Column
		}
		return a.Path < b.Path
	})
}

// pos is a place in the file.
type pos struct{ line, col int }

// problems collects errors (or warnings) while a file is read.
type problems struct {
	list Errors
}

func (p *problems) add(at pos, path, format string, args ...any) {
	p.list = append(p.list, &Error{Line: at.line, Column: at.col, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// suggest returns the candidate closest to s when it is close enough to be
// a likely typo: equal but for case, or within an edit distance of about a
// third of its length.
func suggest(s string, candidates []string) (string, bool) {
	best, bestD := "", 1<<30
	for _, c := range candidates {
		if strings.EqualFold(s, c) {
			return c, true
		}
		d := editDistance(strings.ToLower(s), strings.ToLower(c))
		if d < bestD {
			best, bestD = c, d
		}
	}
	limit := max(1, min(3, len(s)/3))
	if best == "" || bestD > limit {
		return "", false
	}
	return best, true
}

// didYouMean is suggest as a message suffix: ` (did you mean "x"?)` or "".
func didYouMean(s string, candidates []string) string {
	if c, ok := suggest(s, candidates); ok {
		return fmt.Sprintf(" (did you mean %q?)", c)
	}
	return ""
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	if len(a) > 256 || len(b) > 256 {
		return max(len(a), len(b)) // not a typo; bounded cost for huge keys
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
