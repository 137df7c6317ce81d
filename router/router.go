package router

import (
	"fmt"
	"strings"

	"github.com/queuebox/queuebox/address"
	"github.com/queuebox/queuebox/outbox"
)

// RouteSpec is a route as configured: a topic pattern, the name of a
// destination and, optionally, a when: filter, a transform: of the body and
// the policy for their runtime errors.
type RouteSpec struct {
	Pattern     string
	Destination string
	When        string  // boolean expression over Env; "" matches every topic of Pattern
	Transform   string  // expression whose JSON-encoded result is the delivered body; "" sends the payload as stored
	OnError     OnError // what a runtime error of When or Transform does; "" is OnErrorDead
}

// OnError is a route's policy for an expression that fails at runtime (a
// type error on this payload, a missing field dereferenced, a result that
// is not a boolean or not JSON).
type OnError string

const (
	// OnErrorDead dead-letters the row at once with the route and the
	// error (outbox.Permanent). The default: the same row and expression
	// fail the same way on every attempt.
	OnErrorDead OnError = "dead"
	// OnErrorRetry fails the delivery with a retryable error: the row is
	// retried with backoff and goes dead after max_attempts.
	OnErrorRetry OnError = "retry"
	// OnErrorSkip treats the route as not matching: the next route is
	// tried (and with none left the row has no route).
	OnErrorSkip OnError = "skip"
)

// OnErrorValues lists the valid OnError values.
var OnErrorValues = []string{string(OnErrorRetry), string(OnErrorSkip), string(OnErrorDead)}

// ParseOnError returns the policy named s; "" is OnErrorDead.
func ParseOnError(s string) (OnError, error) {
	switch OnError(s) {
	case "":
		return OnErrorDead, nil
	case OnErrorDead, OnErrorRetry, OnErrorSkip:
		return OnError(s), nil
	}
	return "", fmt.Errorf("must be one of %s, got %q", strings.Join(OnErrorValues, ", "), s)
}

// Route is a compiled route. When and Transform are nil for a route that
// has none; such a route costs a pattern match and nothing more.
type Route struct {
	Pattern     address.Pattern
	Destination string
	Index       int // position in the configured list, from 0
	When        *Expr
	Transform   *Expr
	OnError     OnError
}

// Conditional reports whether the route can decline a topic its pattern
// matches: it has a when:, or a transform: whose errors skip it.
func (rt *Route) Conditional() bool {
	return rt.When != nil || (rt.Transform != nil && rt.OnError == OnErrorSkip)
}

// Router matches rows against an ordered list of routes; the first match
// wins. It is safe for concurrent use once built.
type Router struct {
	routes []Route
}

// New compiles specs in order. An invalid pattern, an empty destination,
// an expression that does not compile or an unknown OnError is an error
// naming the route and the key, such as routes[2].topicPattern or
// "routes[1].when: syntax error at line 1, column 12: ...".
func New(specs []RouteSpec) (*Router, error) {
	r := &Router{routes: make([]Route, 0, len(specs))}
	for i, s := range specs {
		p, err := address.ParsePattern(s.Pattern)
		if err != nil {
			return nil, fmt.Errorf("routes[%d].topicPattern: %w", i, err)
		}
		if s.Destination == "" {
			return nil, fmt.Errorf("routes[%d].destination: required", i)
		}
		rt := Route{Pattern: p, Destination: s.Destination, Index: i}
		if s.When != "" {
			if rt.When, err = CompileExpr(s.When, WhenExpr); err != nil {
				return nil, fmt.Errorf("routes[%d].when: %w", i, err)
			}
		}
		if s.Transform != "" {
			if rt.Transform, err = CompileExpr(s.Transform, TransformExpr); err != nil {
				return nil, fmt.Errorf("routes[%d].transform: %w", i, err)
			}
		}
		if rt.OnError, err = ParseOnError(string(s.OnError)); err != nil {
			return nil, fmt.Errorf("routes[%d].onError: %w", i, err)
		}
		r.routes = append(r.routes, rt)
	}
	return r, nil
}

// Routes returns the compiled routes in order.
func (r *Router) Routes() []Route { return append([]Route(nil), r.routes...) }

// Match returns the first route whose pattern matches topic, and false when
// none does. It looks at patterns only: a when: is not evaluated (Route
// does that).
func (r *Router) Match(topic string) (Route, bool) {
	for i := range r.routes {
		if r.routes[i].Pattern.Match(topic) {
			return r.routes[i], true
		}
	}
	return Route{}, false
}

// Route returns the destination for msg: the first route whose pattern
// matches the topic and whose when: (if any) is true. A route with a
// transform: replaces msg.Payload with the transformed body; the engine
// passes a copy of the row, so the stored row is unchanged.
//
// Errors: a *NoRouteError (wrapping outbox.ErrNoRoute) when no route
// takes the row; for an expression that fails at runtime, per the route's
// OnError, a *RouteExprError that is permanent (dead) or retryable (retry),
// or nothing and the next route (skip). It satisfies the relay's Router
// interface.
func (r *Router) Route(msg *outbox.Message) (string, error) {
	var ev evaluation // stays on the stack; filled on the first expression route
	for i := range r.routes {
		rt := &r.routes[i]
		if !rt.Pattern.Match(msg.Topic) {
			continue
		}
		if rt.When == nil && rt.Transform == nil {
			return rt.Destination, nil
		}
		ok, err := rt.apply(msg, &ev)
		if err != nil {
			switch rt.OnError {
			case OnErrorSkip:
				continue
			case OnErrorRetry:
				return "", err
			default:
				return "", outbox.Permanent(err)
			}
		}
		if ok {
			return rt.Destination, nil
		}
	}
	return "", r.NoRouteError(msg.Topic)
}

// apply evaluates the route's when: and transform: for msg, whose topic
// matches. It reports false when the when: is false; it changes
// msg.Payload only when it reports true.
func (rt *Route) apply(msg *outbox.Message, ev *evaluation) (bool, error) {
	if rt.When != nil {
		env, err := ev.environment(msg, rt.When)
		if err != nil {
			return false, rt.exprError(rt.When, err)
		}
		ok, err := rt.When.evalBool(env)
		if err != nil {
			return false, rt.exprError(rt.When, err)
		}
		if !ok {
			return false, nil
		}
	}
	if rt.Transform != nil {
		env, err := ev.environment(msg, rt.Transform)
		if err != nil {
			return false, rt.exprError(rt.Transform, err)
		}
		body, err := rt.Transform.evalBody(env)
		if err != nil {
			return false, rt.exprError(rt.Transform, err)
		}
		msg.Payload = body
	}
	return true, nil
}

func (rt *Route) exprError(e *Expr, err error) error {
	return &RouteExprError{Route: rt.Index, Pattern: rt.Pattern.String(), Kind: e.kind, Err: err}
}

// RouteExprError is a route expression that failed on a row. Its text
// names the route and the key: routes[1] ("order.**") transform: cannot
// fetch b from int (at line 1, column 11).
type RouteExprError struct {
	Route   int // index in the configured list
	Pattern string
	Kind    ExprKind
	Err     error
}

func (e *RouteExprError) Error() string {
	return fmt.Sprintf("routes[%d] (%q) %s: %v", e.Route, e.Pattern, e.Kind, e.Err)
}

func (e *RouteExprError) Unwrap() error { return e.Err }

// maxReasonRoutes bounds how many patterns a no-route reason lists.
const maxReasonRoutes = 10

// NoRouteReason explains why topic has no route, listing the configured
// patterns: no route matches topic "x" (routes: order.**, invoice.*).
func (r *Router) NoRouteReason(topic string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "no route matches topic %q (routes: ", topic)
	for i, rt := range r.routes {
		if i == maxReasonRoutes {
			fmt.Fprintf(&b, ", … %d more", len(r.routes)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(rt.Pattern.String())
	}
	if len(r.routes) == 0 {
		b.WriteString("none")
	}
	b.WriteString(")")
	return b.String()
}

// NoRouteError returns the error for a topic that matches no route: its
// message is NoRouteReason(topic) and errors.Is(err, outbox.ErrNoRoute)
// holds.
func (r *Router) NoRouteError(topic string) error {
	return &NoRouteError{Topic: topic, Reason: r.NoRouteReason(topic)}
}

// NoRouteError reports a topic that matches no route.
type NoRouteError struct {
	Topic  string
	Reason string
}

func (e *NoRouteError) Error() string { return e.Reason }

// Unwrap returns outbox.ErrNoRoute.
func (e *NoRouteError) Unwrap() error { return outbox.ErrNoRoute }
