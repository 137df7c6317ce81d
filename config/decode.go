package config

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"

	"github.com/queuebox/queuebox/suggest"
)

// decoder fills the typed configuration from the YAML syntax tree. It is
// strict: an unknown key, a duplicate key or a value of the wrong kind is
// an error naming the path. Every key it meets is recorded in seen, so that
// validation can tell "absent" from "zero" and point at the line.
type decoder struct {
	errs    problems
	seen    map[string]pos
	anchors map[string]ast.Node
	cols    columnMap
	// envValues are the values ${VAR} expansions inserted: kindOf never
	// quotes a scalar that holds one.
	envValues []string
	merged    int // keys read through merge keys (<<), bounded against alias bombs
}

// maxMergedKeys bounds the work that merge keys of aliases can cause: a
// chain of mappings that each merge several aliases of the previous one
// grows exponentially.
const maxMergedKeys = 10000

var durationType = reflect.TypeOf(Duration(0))

func (d *decoder) at(n ast.Node) pos {
	if n == nil {
		return pos{}
	}
	tk := n.GetToken()
	if tk == nil || tk.Position == nil {
		return pos{}
	}
	line := tk.Position.Line
	return pos{line, d.cols.orig(line, tk.Position.Column)}
}

func (d *decoder) fail(n ast.Node, path, format string, args ...any) {
	d.errs.add(d.at(n), path, format, args...)
}

// collectAnchors records every anchor in the tree, so that an alias may
// refer to a value under any key.
func (d *decoder) collectAnchors(n ast.Node, depth int) {
	if n == nil || depth > 1000 {
		return
	}
	switch n := n.(type) {
	case *ast.AnchorNode:
		if n.Name != nil {
			d.anchors[n.Name.GetToken().Value] = n.Value
		}
		d.collectAnchors(n.Value, depth+1)
	case *ast.TagNode:
		d.collectAnchors(n.Value, depth+1)
	case *ast.MappingNode:
		for _, v := range n.Values {
			d.collectAnchors(v, depth+1)
		}
	case *ast.MappingValueNode:
		d.collectAnchors(n.Key, depth+1)
		d.collectAnchors(n.Value, depth+1)
	case *ast.SequenceNode:
		for _, v := range n.Values {
			d.collectAnchors(v, depth+1)
		}
	}
}

// resolve looks through anchors, aliases and tags to the value node. The
// node returned for errors (where) is the one written at this place.
func (d *decoder) resolve(n ast.Node, path string) (ast.Node, bool) {
	where := n
	for range 100 {
		switch x := n.(type) {
		case *ast.AnchorNode:
			n = x.Value
		case *ast.TagNode:
			n = x.Value
		case *ast.AliasNode:
			name := ""
			if x.Value != nil {
				name = x.Value.GetToken().Value
			}
			target, ok := d.anchors[name]
			if !ok {
				d.fail(where, path, "unknown alias *%s", name)
				return nil, false
			}
			n = target
		default:
			return n, true
		}
	}
	d.fail(where, path, "aliases nest too deeply")
	return nil, false
}

func isNull(n ast.Node) bool {
	if n == nil {
		return true
	}
	_, ok := n.(*ast.NullNode)
	return ok
}

// kindOf describes n for an error: its kind, or a scalar's text. A scalar
// on a line where ${VAR} was expanded is described without its text: the
// variable may hold a secret (servers: ${NATS_URL} without brackets showed
// the URL and its password), and config errors are printed and logged.
func (d *decoder) kindOf(n ast.Node) string {
	switch n.(type) {
	case *ast.MappingNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.NullNode:
		return "nothing"
	}
	text := scalarText(n)
	if tk := n.GetToken(); tk != nil && d.cols.expandedIn(tk.Position.Line, tk.Position.Column, len(tk.Origin)) {
		return "a value from the environment (not shown)"
	}
	for _, v := range d.envValues {
		// A scalar over several lines (block or folded), or one that holds
		// a variable's value among other text.
		if strings.Contains(text, v) {
			return "a value from the environment (not shown)"
		}
	}
	return fmt.Sprintf("%q", text)
}

func scalarText(n ast.Node) string {
	switch x := n.(type) {
	case *ast.StringNode:
		return x.Value
	case *ast.LiteralNode:
		if x.Value != nil {
			return x.Value.Value
		}
		return ""
	}
	if tk := n.GetToken(); tk != nil {
		return tk.Value
	}
	return ""
}

func isScalar(n ast.Node) bool {
	switch n.(type) {
	case *ast.StringNode, *ast.LiteralNode, *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode,
		*ast.InfinityNode, *ast.NanNode:
		return true
	}
	return false
}

// decode stores the value of node n, written at path, into v.
func (d *decoder) decode(n ast.Node, v reflect.Value, path string) {
	where := n
	n, ok := d.resolve(n, path)
	if !ok || isNull(n) {
		return
	}
	if v.Type() == durationType {
		d.decodeDuration(where, n, v, path)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(n, v.Elem(), path)
	case reflect.Struct:
		d.decodeStruct(where, n, v, path)
	case reflect.Map:
		d.decodeMap(where, n, v, path)
	case reflect.Slice:
		seq, ok := n.(*ast.SequenceNode)
		if !ok {
			d.fail(where, path, "expected a list, got %s", d.kindOf(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(seq.Values), len(seq.Values))
		for i, item := range seq.Values {
			p := fmt.Sprintf("%s[%d]", path, i)
			d.seen[p] = d.at(item)
			d.decode(item, s.Index(i), p)
		}
		v.Set(s)
	case reflect.String:
		if !isScalar(n) {
			d.fail(where, path, "expected a string, got %s", d.kindOf(n))
			return
		}
		v.SetString(scalarText(n))
	case reflect.Int:
		var i int64
		switch x := n.(type) {
		case *ast.IntegerNode:
			switch iv := x.Value.(type) {
			case int64:
				i = iv
			case uint64:
				if iv > math.MaxInt64 {
					d.fail(where, path, "integer %s is out of range", scalarText(n))
					return
				}
				i = int64(iv)
			default:
				d.fail(where, path, "integer %s is out of range", scalarText(n))
				return
			}
		default:
			parsed, err := strconv.ParseInt(strings.TrimSpace(scalarText(n)), 10, 64)
			if !isScalar(n) || err != nil {
				d.fail(where, path, "expected an integer, got %s", d.kindOf(n))
				return
			}
			i = parsed
		}
		if int64(int(i)) != i {
			d.fail(where, path, "integer %d is out of range", i)
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		f, err := strconv.ParseFloat(strings.TrimSpace(scalarText(n)), 64)
		if _, isInt := n.(*ast.IntegerNode); isInt && err != nil {
			err = nil // a huge integer: still a number
			f = math.Inf(1)
		}
		if !isScalar(n) || err != nil {
			d.fail(where, path, "expected a number, got %s", d.kindOf(n))
			return
		}
		v.SetFloat(f)
	case reflect.Bool:
		switch x := n.(type) {
		case *ast.BoolNode:
			v.SetBool(x.Value)
		default:
			b, err := strconv.ParseBool(strings.TrimSpace(scalarText(n)))
			if !isScalar(n) || err != nil {
				d.fail(where, path, "expected true or false, got %s", d.kindOf(n))
				return
			}
			v.SetBool(b)
		}
	default:
		d.fail(where, path, "cannot decode into %s", v.Type())
	}
}

func (d *decoder) decodeDuration(where, n ast.Node, v reflect.Value, path string) {
	if !isScalar(n) {
		d.fail(where, path, "expected a duration such as 30s, got %s", d.kindOf(n))
		return
	}
	dur, err := ParseDuration(scalarText(n))
	if err != nil {
		if k := d.kindOf(n); !strings.HasPrefix(k, `"`) {
			// From the environment: the parse error would quote it.
			d.fail(where, path, "expected a duration such as 30s, got %s", k)
			return
		}
		d.fail(where, path, "%v", err)
		return
	}
	v.SetInt(int64(dur))
}

// entry is one key of a mapping, after merge keys (<<) are applied.
type entry struct {
	key   string
	keyAt ast.Node
	value ast.Node
}

// entries lists the keys of mapping n in order. Keys merged in with "<<"
// come first and are overridden by keys written in n; a key written twice
// in n is an error.
func (d *decoder) entries(n *ast.MappingNode, path string, depth int) []entry {
	var merged, own []entry
	first := map[string]ast.Node{}
	for _, mv := range n.Values {
		if mv == nil || mv.Key == nil {
			continue
		}
		if mv.Key.IsMergeKey() {
			if depth > 10 {
				d.fail(mv.Key, path, "merge keys nest too deeply")
				continue
			}
			src, ok := d.resolve(mv.Value, path)
			if !ok {
				continue
			}
			var maps []ast.Node
			if seq, isSeq := src.(*ast.SequenceNode); isSeq {
				maps = seq.Values
			} else {
				maps = []ast.Node{src}
			}
			for _, m := range maps {
				m, ok := d.resolve(m, path)
				if !ok {
					continue
				}
				mm, isMap := m.(*ast.MappingNode)
				if !isMap {
					d.fail(mv.Value, path, "a merge key (<<) needs a mapping, got %s", d.kindOf(m))
					continue
				}
				d.merged += len(mm.Values)
				if d.merged > maxMergedKeys {
					d.fail(mv.Key, path, "merge keys (<<) expand to more than %d keys", maxMergedKeys)
					return nil
				}
				merged = append(merged, d.entries(mm, path, depth+1)...)
			}
			continue
		}
		keyNode, ok := d.resolve(mv.Key, path)
		if !ok {
			continue
		}
		if !isScalar(keyNode) && !isNull(keyNode) {
			d.fail(mv.Key, path, "a key must be a plain string, got %s", d.kindOf(keyNode))
			continue
		}
		key := ""
		if !isNull(keyNode) {
			key = scalarText(keyNode)
		}
		if prev, dup := first[key]; dup {
			p := d.at(prev)
			d.fail(mv.Key, join(path, key), "duplicate key (first defined at %d:%d)", p.line, p.col)
			continue
		}
		first[key] = mv.Key
		own = append(own, entry{key: key, keyAt: mv.Key, value: mv.Value})
	}
	if len(merged) == 0 {
		return own
	}
	out := make([]entry, 0, len(merged)+len(own))
	for _, e := range merged {
		if _, overridden := first[e.key]; !overridden {
			first[e.key] = e.keyAt
			out = append(out, e)
		}
	}
	return append(out, own...)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// yamlFields maps the yaml keys of struct type t to field indexes.
func yamlFields(t reflect.Type) (map[string]int, []string) {
	idx := map[string]int{}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		idx[name] = i
		names = append(names, name)
	}
	return idx, names
}

func (d *decoder) decodeStruct(where, n ast.Node, v reflect.Value, path string) {
	m, ok := n.(*ast.MappingNode)
	if !ok {
		d.fail(where, path, "expected a mapping, got %s", d.kindOf(n))
		return
	}
	fields, names := yamlFields(v.Type())
	for _, e := range d.entries(m, path, 0) {
		p := join(path, e.key)
		i, known := fields[e.key]
		if !known {
			msg := "unknown key" + suggest.DidYouMean(e.key, names)
			if !strings.HasSuffix(msg, "?)") {
				msg += " (known: " + strings.Join(names, ", ") + ")"
			}
			d.fail(e.keyAt, p, "%s", msg)
			continue
		}
		d.seen[p] = d.at(e.keyAt)
		d.decode(e.value, v.Field(i), p)
	}
}

func (d *decoder) decodeMap(where, n ast.Node, v reflect.Value, path string) {
	m, ok := n.(*ast.MappingNode)
	if !ok {
		d.fail(where, path, "expected a mapping, got %s", d.kindOf(n))
		return
	}
	if v.IsNil() {
		v.Set(reflect.MakeMap(v.Type()))
	}
	for _, e := range d.entries(m, path, 0) {
		p := join(path, e.key)
		d.seen[p] = d.at(e.keyAt)
		elem := reflect.New(v.Type().Elem()).Elem()
		d.decode(e.value, elem, p)
		v.SetMapIndex(reflect.ValueOf(e.key), elem)
	}
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// tokenPos is the position of a goccy token, for parse errors.
func (d *decoder) tokenPos(tk *token.Token) pos {
	if tk == nil || tk.Position == nil {
		return pos{}
	}
	return pos{tk.Position.Line, d.cols.orig(tk.Position.Line, tk.Position.Column)}
}

// ParseDuration parses a Go duration ("250ms", "30s", "1h30m"). A number
// without a unit is an error that says how to write it.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		hint := ""
		if _, numErr := strconv.ParseFloat(strings.TrimSpace(s), 64); numErr == nil {
			hint = fmt.Sprintf(" (write e.g. %ss)", strings.TrimSpace(s))
		}
		return 0, fmt.Errorf("invalid duration %q: %v%s", s, err, hint)
	}
	return d, nil
}
