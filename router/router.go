package router

import (
	"fmt"
	"strings"

	"github.com/queuebox/queuebox/outbox"
)

// RouteSpec is a route as configured: a topic pattern and the name of a
// destination.
type RouteSpec struct {
	Pattern     string
	Destination string
}

// Route is a compiled route. Later fields (a When expression, a Transform,
// an OnError policy) are added here; the zero value of each keeps today's
// behaviour.
type Route struct {
	Pattern     Pattern
	Destination string
	Index       int // position in the configured list, from 0
}

// Router matches topics against an ordered list of routes; the first match
// wins. It is safe for concurrent use once built.
type Router struct {
	routes []Route
}

// New compiles specs in order. An invalid pattern or an empty destination
// is an error naming the route, such as routes[2].topicPattern.
func New(specs []RouteSpec) (*Router, error) {
	r := &Router{routes: make([]Route, 0, len(specs))}
	for i, s := range specs {
		p, err := ParsePattern(s.Pattern)
		if err != nil {
			return nil, fmt.Errorf("routes[%d].topicPattern: %w", i, err)
		}
		if s.Destination == "" {
			return nil, fmt.Errorf("routes[%d].destination: required", i)
		}
		r.routes = append(r.routes, Route{Pattern: p, Destination: s.Destination, Index: i})
	}
	return r, nil
}

// Routes returns the compiled routes in order.
func (r *Router) Routes() []Route { return append([]Route(nil), r.routes...) }

// Match returns the first route whose pattern matches topic, and false when
// none does.
func (r *Router) Match(topic string) (Route, bool) {
	for i := range r.routes {
		if r.routes[i].Pattern.Match(topic) {
			return r.routes[i], true
		}
	}
	return Route{}, false
}

// Route returns the destination name for msg, or a *NoRouteError (which
// wraps outbox.ErrNoRoute) when no route matches its topic. It satisfies
// the relay's Router interface.
func (r *Router) Route(msg *outbox.Message) (string, error) {
	rt, ok := r.Match(msg.Topic)
	if !ok {
		return "", r.NoRouteError(msg.Topic)
	}
	return rt.Destination, nil
}

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
