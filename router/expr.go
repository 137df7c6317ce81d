package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/parser"
	"github.com/expr-lang/expr/vm"

	"github.com/queuebox/queuebox/outbox"
)

// Env is the environment of a route expression (when: and transform:).
// Its expr tags are the names an expression uses. Payload is the row's
// payload decoded from JSON (objects as map[string]any, arrays as []any,
// integers that fit an int as int, other numbers as float64, strings,
// booleans and nil); it is decoded only for expressions that name it.
// Headers is never nil.
type Env struct {
	ID            string            `expr:"id"`
	Topic         string            `expr:"topic"`
	Key           string            `expr:"key"`
	AggregateType string            `expr:"aggregateType"`
	Headers       map[string]string `expr:"headers"`
	Payload       any               `expr:"payload"`
	Attempt       int               `expr:"attempt"`
}

// EnvNames lists the variables of Env, for messages and documentation.
var EnvNames = []string{"id", "topic", "key", "aggregateType", "headers", "payload", "attempt"}

// exprFunctions are the functions queuebox adds to expr's builtins.
var exprFunctions = []expr.Option{
	expr.Function("omit", omitFunc),
	expr.Function("pick", pickFunc),
	expr.Function("merge", mergeFunc),
}

// ExprKind says what an expression is for.
type ExprKind int

const (
	// WhenExpr is a route's when: a boolean filter.
	WhenExpr ExprKind = iota
	// TransformExpr is a route's transform: its result becomes the body.
	TransformExpr
)

func (k ExprKind) String() string {
	if k == TransformExpr {
		return "transform"
	}
	return "when"
}

// Expr is a compiled route expression. It is safe for concurrent use.
type Expr struct {
	src         string
	kind        ExprKind
	prog        *vm.Program
	usesPayload bool
}

// ExprError is an expression that does not compile. Line and Column count
// from 1 and are 0 when the problem has no place in the source (a when:
// whose result is not a boolean, say).
type ExprError struct {
	Syntax bool // the source does not parse
	Line   int
	Column int
	Msg    string
}

func (e *ExprError) Error() string {
	kind := "invalid expression"
	if e.Syntax {
		kind = "syntax error"
	}
	if e.Line == 0 {
		return kind + ": " + e.Msg
	}
	return fmt.Sprintf("%s at line %d, column %d: %s", kind, e.Line, e.Column, e.Msg)
}

// CompileExpr compiles src as a when: (a boolean) or a transform: (any
// value) expression over Env. A syntax error, an unknown name, a type
// error that can be seen without a row, and a when: whose result cannot be
// a boolean are *ExprError values carrying the position.
func CompileExpr(src string, kind ExprKind) (*Expr, error) {
	if strings.TrimSpace(src) == "" {
		return nil, &ExprError{Msg: "empty expression"}
	}
	tree, err := parser.Parse(src)
	if err != nil {
		return nil, exprError(err, true)
	}
	opts := append([]expr.Option{expr.Env(Env{})}, exprFunctions...)
	if kind == WhenExpr {
		opts = append(opts, expr.AsBool())
	}
	prog, err := expr.Compile(src, opts...)
	if err != nil {
		var fe *file.Error
		if kind == WhenExpr && !errors.As(err, &fe) {
			// expr.AsBool reports a result that cannot be a boolean
			// without a position ("expected bool, but got string").
			return nil, &ExprError{Msg: "the result must be a boolean: " + err.Error()}
		}
		return nil, exprError(err, false)
	}
	e := &Expr{src: src, kind: kind, prog: prog}
	ast.Walk(&tree.Node, identVisitor(func(name string) {
		if name == "payload" {
			e.usesPayload = true
		}
	}))
	return e, nil
}

// identVisitor calls its function with every identifier of a tree.
type identVisitor func(name string)

func (f identVisitor) Visit(n *ast.Node) {
	if id, ok := (*n).(*ast.IdentifierNode); ok {
		f(id.Value)
	}
}

func exprError(err error, syntax bool) *ExprError {
	var fe *file.Error
	if errors.As(err, &fe) {
		return &ExprError{Syntax: syntax, Line: fe.Line, Column: fe.Column + 1, Msg: fe.Message}
	}
	return &ExprError{Syntax: syntax, Msg: err.Error()}
}

// String returns the expression as written.
func (e *Expr) String() string { return e.src }

// UsesPayload reports whether the expression names payload, that is,
// whether evaluating it needs the payload decoded.
func (e *Expr) UsesPayload() bool { return e.usesPayload }

// Eval runs the expression against env. The error of a failed evaluation
// is one line (expr's source snippet is left out) ending in the position.
func (e *Expr) Eval(env *Env) (any, error) {
	out, err := expr.Run(e.prog, env)
	if err != nil {
		var fe *file.Error
		if errors.As(err, &fe) {
			if fe.Line > 0 {
				return nil, fmt.Errorf("%s (at line %d, column %d)", fe.Message, fe.Line, fe.Column+1)
			}
			return nil, errors.New(fe.Message)
		}
		return nil, err
	}
	return out, nil
}

// evalBool runs a when: expression.
func (e *Expr) evalBool(env *Env) (bool, error) {
	out, err := e.Eval(env)
	if err != nil {
		return false, err
	}
	b, ok := out.(bool)
	if !ok {
		return false, fmt.Errorf("result is %T, not a boolean", out)
	}
	return b, nil
}

// evalBody runs a transform: expression and JSON-encodes its result. A
// string result becomes a JSON string; HTML characters are not escaped.
func (e *Expr) evalBody(env *Env) ([]byte, error) {
	out, err := e.Eval(env)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(jsonable(out)); err != nil {
		return nil, fmt.Errorf("result is not JSON: %v", err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// jsonable converts the maps with interface keys that some expr builtins
// build (fromPairs, groupBy) into maps with string keys, which
// encoding/json can encode; non-string keys are printed with %v. Values
// without such a map are returned as they are, without a copy.
func jsonable(v any) any {
	out, _ := convertAnyMaps(v)
	return out
}

func convertAnyMaps(v any) (any, bool) {
	switch x := v.(type) {
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			ks, ok := k.(string)
			if !ok {
				ks = fmt.Sprint(k)
			}
			out[ks], _ = convertAnyMaps(e)
		}
		return out, true
	case map[string]any:
		var out map[string]any
		for k, e := range x {
			if c, changed := convertAnyMaps(e); changed {
				if out == nil {
					out = make(map[string]any, len(x))
					for k2, e2 := range x {
						out[k2] = e2
					}
				}
				out[k] = c
			}
		}
		if out == nil {
			return x, false
		}
		return out, true
	case []any:
		var out []any
		for i, e := range x {
			if c, changed := convertAnyMaps(e); changed {
				if out == nil {
					out = append([]any(nil), x...)
				}
				out[i] = c
			}
		}
		if out == nil {
			return x, false
		}
		return out, true
	default:
		return v, false
	}
}

// DecodePayload decodes a JSON payload the way expressions see it: numbers
// that are integers and fit an int become int, other numbers float64.
func DecodePayload(payload []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(payload))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("payload is not JSON: %v", err)
	}
	if d.More() {
		return nil, errors.New("payload is not JSON: data after the value")
	}
	return numbers(v), nil
}

func numbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
		return x
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil && i >= math.MinInt && i <= math.MaxInt {
			return int(i)
		}
		if f, err := x.Float64(); err == nil {
			return f
		}
		return string(x) // out of float64 range: keep the digits
	default:
		return v
	}
}

// omitFunc is omit(map, key...): a copy of map without the keys.
func omitFunc(params ...any) (any, error) {
	m, keys, err := mapAndKeys("omit", params)
	if err != nil {
		return nil, err
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	for _, k := range keys {
		delete(out, k)
	}
	return out, nil
}

// pickFunc is pick(map, key...): a map of only the keys that map has.
func pickFunc(params ...any) (any, error) {
	m, keys, err := mapAndKeys("pick", params)
	if err != nil {
		return nil, err
	}
	out := make(map[string]any, len(keys))
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out, nil
}

// mergeFunc is merge(map...): one map of every key, later maps winning.
func mergeFunc(params ...any) (any, error) {
	out := map[string]any{}
	for i, p := range params {
		m, _, err := mapAndKeys("merge", []any{p})
		if err != nil {
			return nil, fmt.Errorf("merge: argument %d is %T, not an object", i+1, p)
		}
		for k, v := range m {
			out[k] = v
		}
	}
	return out, nil
}

func mapAndKeys(name string, params []any) (map[string]any, []string, error) {
	if len(params) == 0 {
		return nil, nil, fmt.Errorf("%s(map, key...) needs a map", name)
	}
	var m map[string]any
	switch x := params[0].(type) {
	case map[string]any:
		m = x
	case map[string]string:
		m = make(map[string]any, len(x))
		for k, v := range x {
			m[k] = v
		}
	default:
		return nil, nil, fmt.Errorf("%s: first argument is %T, not an object", name, params[0])
	}
	keys := make([]string, 0, len(params)-1)
	for _, p := range params[1:] {
		switch k := p.(type) {
		case string:
			keys = append(keys, k)
		case []any:
			for _, e := range k {
				s, ok := e.(string)
				if !ok {
					return nil, nil, fmt.Errorf("%s: key %v is not a string", name, e)
				}
				keys = append(keys, s)
			}
		default:
			return nil, nil, fmt.Errorf("%s: key %v is not a string", name, p)
		}
	}
	return m, keys, nil
}

// evaluation is the per-message state of Route: the environment, built on
// the first expression route that matches, and the payload, decoded once
// on the first expression that names it.
type evaluation struct {
	env       *Env
	decoded   bool
	decodeErr error
}

func (ev *evaluation) environment(msg *outbox.Message, e *Expr) (*Env, error) {
	if ev.env == nil {
		h := msg.Headers
		if h == nil {
			h = map[string]string{}
		}
		ev.env = &Env{
			ID: msg.ID, Topic: msg.Topic, Key: msg.Key, AggregateType: msg.AggregateType,
			Headers: h, Attempt: msg.Attempt,
		}
	}
	if e.usesPayload && !ev.decoded {
		ev.decoded = true
		ev.env.Payload, ev.decodeErr = DecodePayload(msg.Payload)
	}
	if e.usesPayload && ev.decodeErr != nil {
		return nil, ev.decodeErr
	}
	return ev.env, nil
}
