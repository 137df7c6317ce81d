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
