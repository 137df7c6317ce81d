package config

import (
	"bytes"
	"regexp"
	"strings"
)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// span records one substitution on a line, as 0-based byte offsets into the
// expanded and the original line.
type span struct{ expStart, expEnd, origStart, origEnd int }

// columnMap maps columns of the expanded text back to the file as written.
type columnMap map[int][]span

// expandedIn reports whether text from a ${VAR} expansion lies within
// columns [col, col+width) (from 1) of the expanded line ($$ escapes do
// not count).
func (m columnMap) expandedIn(line, col, width int) bool {
	start, end := col-1, col-1+max(width, 1)
	for _, s := range m[line] {
		if s.origEnd-s.origStart == 2 && s.expEnd-s.expStart == 1 {
			continue // $$
		}
		if s.expStart < end && start < max(s.expEnd, s.expStart+1) {
			return true
		}
	}
	return false
}

// orig returns the column in the original line for a column (from 1) of
// the expanded line.
func (m columnMap) orig(line, col int) int {
	c, delta := col-1, 0
	for _, s := range m[line] {
		if c < s.expStart {
			break
		}
		if c < s.expEnd {
			return s.origStart + 1
		}
		delta = s.origEnd - s.expEnd
	}
	return c + delta + 1
}

// expandEnv replaces ${VAR} and ${VAR:-default} with values from lookup,
// and $$ with $, line by line. A "$" followed by anything else is kept.
// Comments (a "#" at the start of a line or after white space, outside
// quotes) are left alone. A variable that is unset, with no default, is an
// error, as is a value with a line break (it would move every later line).
// It returns the text, where each expansion was (for error columns), and
// the non-empty values it inserted, as the variables hold them (so that
// errors never quote them: decoder.kindOf).
func expandEnv(src []byte, lookup func(string) (string, bool)) ([]byte, columnMap, []string, Errors) {
	if !bytes.Contains(src, []byte("$")) {
		return src, nil, nil, nil
	}
	var values []string
	var out bytes.Buffer
	out.Grow(len(src))
	cols := columnMap{}
	var errs problems
	lines := strings.SplitAfter(string(src), "\n")
	for n, line := range lines {
		lineNo := n + 1
		lineStart := out.Len()
		var quote byte
		for i := 0; i < len(line); {
			c := line[i]
			switch {
			case quote == 0 && c == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
				out.WriteString(line[i:])
				i = len(line)
				continue
			case c == '"' || c == '\'':
				if quote == 0 && (i == 0 || strings.IndexByte(" \t:[{,-", line[i-1]) >= 0) {
					quote = c
				} else if quote == c && (c == '\'' || i == 0 || line[i-1] != '\\') {
					quote = 0
				}
			case c == '$' && i+1 < len(line) && line[i+1] == '$':
				cols[lineNo] = append(cols[lineNo], span{out.Len() - lineStart, out.Len() - lineStart + 1, i, i + 2})
				out.WriteByte('$')
				i += 2
				continue
			case c == '$' && i+1 < len(line) && line[i+1] == '{':
				end := strings.IndexByte(line[i+2:], '}')
				at := pos{lineNo, i + 1}
				if end < 0 {
					errs.add(at, "", "unclosed \"${\" (write $$ for a literal $)")
					out.WriteString(line[i:])
					i = len(line)
					continue
				}
				expr := line[i+2 : i+2+end]
				name, def, hasDef := strings.Cut(expr, ":-")
				val, ok := "", false
				switch {
				case !envName.MatchString(name):
					errs.add(at, "", "invalid variable name in \"${%s}\" (want ${NAME} or ${NAME:-default}; write $$ for a literal $)", expr)
				default:
					val, ok = lookup(name)
					if hasDef && (!ok || val == "") {
						val, ok = def, true
					}
					if !ok {
						errs.add(at, "", "environment variable %s is not set (use ${%s:-default} to give a default)", name, name)
					} else if strings.ContainsAny(val, "\r\n") {
						errs.add(at, "", "environment variable %s contains a line break, which a configuration value cannot hold", name)
						val = ""
					}
				}
				if val != "" {
					values = append(values, val)
				}
				// The value is the variable's text, whatever the quotes around
				// it: inside "..." YAML would read a backslash as an escape
				// (a password s3cr\et became s3cr<ESC>t) and a quote as the
				// end, inside '...' a quote as the end; escape them there.
				switch quote {
				case '"':
					val = strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(val)
				case '\'':
					val = strings.ReplaceAll(val, `'`, `''`)
				}
				start := out.Len() - lineStart
				out.WriteString(val)
				cols[lineNo] = append(cols[lineNo], span{start, out.Len() - lineStart, i, i + 3 + end})
				i += 3 + end
				continue
			}
			out.WriteByte(c)
			i++
		}
	}
	if len(errs.list) > 0 {
		return nil, nil, nil, errs.list
	}
	return out.Bytes(), cols, values, nil
}
