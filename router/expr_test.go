package router

import (
	"errors"
	"strings"
	"testing"

	"github.com/queuebox/queuebox/outbox"
)

func mustNew(t testing.TB, specs ...RouteSpec) *Router {
	t.Helper()
	r, err := New(specs)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func exprMessage() *outbox.Message {
	return &outbox.Message{
		ID:            "0b4e7c1a-1111-2222-3333-444455556666",
		Topic:         "order.created",
		Key:           "customer-42",
		AggregateType: "order",
		Headers:       map[string]string{"tenant": "acme", "trace-id": "t-1"},
		Attempt:       2,
		Payload:       []byte(`{"customer":{"id":42,"region":"eu","vip":true},"amount":12.5,"items":[{"sku":"a","qty":2}],"card":"4111"}`),
	}
}

func TestWhenSelectsRoute(t *testing.T) {
	t.Parallel()
	r := mustNew(t,
		RouteSpec{Pattern: "order.*", Destination: "eu", When: `payload.customer.region == "eu"`},
		RouteSpec{Pattern: "order.*", Destination: "big", When: `payload.amount >= 100`},
		RouteSpec{Pattern: "order.*", Destination: "acme", When: `headers.tenant == "acme" && attempt > 0`},
		RouteSpec{Pattern: "order.*", Destination: "byType", When: `aggregateType == "order" and key startsWith "customer-"`},
		RouteSpec{Pattern: "**", Destination: "rest"},
	)
	tests := []struct {
		name string
		edit func(m *outbox.Message)
		want string
	}{
		{"payload field", func(m *outbox.Message) {}, "eu"},
		{"next route by payload", func(m *outbox.Message) {
			m.Payload = []byte(`{"customer":{"region":"us"},"amount":250}`)
		}, "big"},
		{"header and attempt", func(m *outbox.Message) {
			m.Payload = []byte(`{"customer":{"region":"us"},"amount":1}`)
		}, "acme"},
		{"attempt 0 falls through", func(m *outbox.Message) {
			m.Payload = []byte(`{"customer":{"region":"us"},"amount":1}`)
			m.Attempt = 0
		}, "byType"},
		{"aggregate type false", func(m *outbox.Message) {
			m.Payload = []byte(`{"customer":{"region":"us"},"amount":1}`)
			m.Headers = nil
			m.AggregateType = "invoice"
		}, "rest"},
	}
	for _, tt := range tests {
		m := exprMessage()
		tt.edit(m)
		stored := string(m.Payload)
		got, err := r.Route(m)
		if err != nil || got != tt.want {
			t.Errorf("%s: Route = %q, %v; want %q", tt.name, got, err, tt.want)
		}
		if string(m.Payload) != stored {
			t.Errorf("%s: when: changed the payload to %s", tt.name, m.Payload)
		}
	}
}

func TestWhenFalseEverywhereIsNoRoute(t *testing.T) {
	t.Parallel()
	r := mustNew(t, RouteSpec{Pattern: "order.*", Destination: "d", When: `topic == "order.paid"`})
	_, err := r.Route(exprMessage())
	if !errors.Is(err, outbox.ErrNoRoute) {
		t.Fatalf("err = %v, want ErrNoRoute", err)
	}
}

func TestTransform(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, transform, want string
	}{
		{"drop a field", `omit(payload, "card")`, `{"amount":12.5,"customer":{"id":42,"region":"eu","vip":true},"items":[{"qty":2,"sku":"a"}]}`},
		{"pick fields", `pick(payload, "amount", "missing")`, `{"amount":12.5}`},
		{"wrap the body", `{"id": id, "type": topic, "tenant": headers.tenant, "data": pick(payload, "amount")}`,
			`{"data":{"amount":12.5},"id":"0b4e7c1a-1111-2222-3333-444455556666","tenant":"acme","type":"order.created"}`},
		{"reshape", `{"customer": payload.customer.id, "lines": map(payload.items, {{"sku": .sku, "n": .qty * 10}})}`,
			`{"customer":42,"lines":[{"n":20,"sku":"a"}]}`},
		{"add a field", `merge(pick(payload, "amount"), {"tenant": headers.tenant})`, `{"amount":12.5,"tenant":"acme"}`},
		{"drop a field with builtins", `fromPairs(filter(toPairs(payload.customer), #[0] != "vip"))`, `{"id":42,"region":"eu"}`},
		{"string is JSON-encoded", `"<" + key + ">"`, `"<customer-42>"`},
		{"headers map", `headers`, `{"tenant":"acme","trace-id":"t-1"}`},
		{"null", `nil`, `null`},
	}
	for _, tt := range tests {
		r := mustNew(t, RouteSpec{Pattern: "order.*", Destination: "d", Transform: tt.transform})
		m := exprMessage()
		stored := m.Payload
		storedText := string(stored)
		got, err := r.Route(m)
		if err != nil || got != "d" {
			t.Errorf("%s: Route = %q, %v", tt.name, got, err)
			continue
		}
		if string(m.Payload) != tt.want {
			t.Errorf("%s: body = %s\nwant %s", tt.name, m.Payload, tt.want)
		}
		if string(stored) != storedText {
			t.Errorf("%s: the stored payload bytes changed", tt.name)
		}
	}
}

func TestTransformOnlyOfTheChosenRoute(t *testing.T) {
	t.Parallel()
	r := mustNew(t,
		RouteSpec{Pattern: "order.*", Destination: "a", When: `attempt > 5`, Transform: `"a"`},
		RouteSpec{Pattern: "order.*", Destination: "b", Transform: `{"b": payload.amount}`},
	)
	m := exprMessage()
	got, err := r.Route(m)
	if err != nil || got != "b" || string(m.Payload) != `{"b":12.5}` {
		t.Fatalf("Route = %q, %v, body %s", got, err, m.Payload)
	}
}

func TestRuntimeErrorPolicies(t *testing.T) {
	t.Parallel()
	// payload.customer.region.x fetches a field of a string: a runtime error.
	bad := []RouteSpec{
		{Pattern: "order.*", Destination: "first", When: `payload.customer.region.x == 1`},
		{Pattern: "order.*", Destination: "first", Transform: `payload.customer.region.x`},
		{Pattern: "order.*", Destination: "first", Transform: `1 / 0`}, // +Inf is not JSON
		{Pattern: "order.*", Destination: "first", When: `payload.customer`},
	}
	for i, spec := range bad {
		for _, mode := range []OnError{"", OnErrorDead, OnErrorRetry, OnErrorSkip} {
			spec.OnError = mode
			r := mustNew(t, spec, RouteSpec{Pattern: "**", Destination: "next"})
			m := exprMessage()
			stored := string(m.Payload)
			got, err := r.Route(m)
			if string(m.Payload) != stored {
				t.Errorf("case %d %q: the payload changed on an error", i, mode)
			}
			if mode == OnErrorSkip {
				if err != nil || got != "next" {
					t.Errorf("case %d skip: Route = %q, %v; want next", i, got, err)
				}
				continue
			}
			var re *RouteExprError
			if !errors.As(err, &re) || re.Route != 0 || !strings.HasPrefix(err.Error(), `routes[0] ("order.*") `) {
				t.Errorf("case %d %q: err = %v, want a RouteExprError naming routes[0]", i, mode, err)
				continue
			}
			if errors.Is(err, outbox.ErrNoRoute) {
				t.Errorf("case %d %q: err wraps ErrNoRoute", i, mode)
			}
			if wantPermanent := mode != OnErrorRetry; outbox.IsPermanent(err) != wantPermanent {
				t.Errorf("case %d %q: permanent = %v, want %v (%v)", i, mode, !wantPermanent, wantPermanent, err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("case %d %q: error has a line break: %q", i, mode, err)
			}
		}
	}
	r := mustNew(t, RouteSpec{Pattern: "order.*", Destination: "d", When: `payload.amount.x == 1`})
	_, err := r.Route(exprMessage())
	if want := `routes[0] ("order.*") when: cannot fetch x from float64 (at line 1, column 16)`; err == nil || err.Error() != want {
		t.Errorf("err = %v\nwant %s", err, want)
	}
}

func TestPayloadNotJSONFollowsOnError(t *testing.T) {
	t.Parallel()
	r := mustNew(t, RouteSpec{Pattern: "**", Destination: "d", When: `payload.a == 1`, OnError: OnErrorRetry})
	m := exprMessage()
	m.Payload = []byte(`{"a":`)
	_, err := r.Route(m)
	if err == nil || outbox.IsPermanent(err) || !strings.Contains(err.Error(), "payload is not JSON") {
		t.Errorf("err = %v", err)
	}
}

func TestPayloadDecodedOnceAndOnlyWhenUsed(t *testing.T) {
	t.Parallel()
	r := mustNew(t,
		RouteSpec{Pattern: "order.*", Destination: "a", When: `payload.amount > 100`},
		RouteSpec{Pattern: "order.*", Destination: "b", When: `payload.customer.vip == false`},
		RouteSpec{Pattern: "order.*", Destination: "c", When: `headers.tenant == "acme"`, Transform: `payload.items`},
	)
	if !r.routes[0].When.UsesPayload() || r.routes[2].When.UsesPayload() || !r.routes[2].Transform.UsesPayload() {
		t.Fatal("UsesPayload is wrong")
	}
	m := exprMessage()
	ev := &evaluation{}
	var decodes int
	for _, rt := range r.routes {
		for _, e := range []*Expr{rt.When, rt.Transform} {
			if e == nil {
				continue
			}
			before := ev.decoded
			if _, err := ev.environment(m, e); err != nil {
				t.Fatal(err)
			}
			if !before && ev.decoded {
				decodes++
			}
		}
	}
	if decodes != 1 {
		t.Errorf("payload decoded %d times, want 1", decodes)
	}

	// A when: over headers only never decodes: a payload that is not JSON
	// is no error for it.
	hr := mustNew(t, RouteSpec{Pattern: "**", Destination: "d", When: `headers.tenant == "acme"`})
	m = exprMessage()
	m.Payload = []byte(`not json`)
	if got, err := hr.Route(m); err != nil || got != "d" {
		t.Errorf("Route = %q, %v", got, err)
	}
}

func TestDecodePayloadNumbers(t *testing.T) {
	t.Parallel()
	v, err := DecodePayload([]byte(`{"i":42,"f":12.50,"neg":-7,"big":12345678901234567890,"e":1e3}`))
	if err != nil {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	if m["i"] != 42 || m["f"] != 12.5 || m["neg"] != -7 || m["big"] != 1.2345678901234567e19 || m["e"] != 1000.0 {
		t.Errorf("decoded %#v", m)
	}
	if _, err := DecodePayload([]byte(`{} {}`)); err == nil {
		t.Error("two values decoded")
	}
}

func TestCompileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		src  string
		kind ExprKind
		want string
	}{
		{`topic == = "x"`, WhenExpr, `syntax error at line 1, column 10: unexpected token Operator("=")`},
		{"topic == \"a\" ||\n  (key", WhenExpr, `syntax error at line 2, column 6: unexpected token EOF`},
		{`tpoic == "x"`, WhenExpr, `invalid expression at line 1, column 1: unknown name tpoic`},
		{`attempt == "x"`, WhenExpr, `invalid expression at line 1, column 9: invalid operation: == (mismatched types int and string)`},
		{`key`, WhenExpr, `invalid expression: the result must be a boolean: expected bool, but got string`},
		{`  `, TransformExpr, `invalid expression: empty expression`},
		{`{"a": }`, TransformExpr, `syntax error at line 1, column 7: unexpected token Bracket("}")`},
	}
	for _, tt := range tests {
		_, err := CompileExpr(tt.src, tt.kind)
		var ee *ExprError
		if !errors.As(err, &ee) || err.Error() != tt.want {
			t.Errorf("CompileExpr(%q) = %v\nwant %s", tt.src, err, tt.want)
		}
	}
	_, err := New([]RouteSpec{{Pattern: "a", Destination: "d"}, {Pattern: "b", Destination: "d", When: `topic == = 1`}})
	if err == nil || err.Error() != `routes[1].when: syntax error at line 1, column 10: unexpected token Operator("=")` {
		t.Errorf("New: %v", err)
	}
	_, err = New([]RouteSpec{{Pattern: "a", Destination: "d", Transform: `foo`}})
	if err == nil || !strings.HasPrefix(err.Error(), "routes[0].transform: invalid expression at line 1, column 1") {
		t.Errorf("New: %v", err)
	}
	_, err = New([]RouteSpec{{Pattern: "a", Destination: "d", OnError: "drop"}})
	if err == nil || err.Error() != `routes[0].onError: must be one of retry, skip, dead, got "drop"` {
		t.Errorf("New: %v", err)
	}
}

func TestConditional(t *testing.T) {
	t.Parallel()
	r := mustNew(t,
		RouteSpec{Pattern: "a", Destination: "d"},
		RouteSpec{Pattern: "a", Destination: "d", When: "true"},
		RouteSpec{Pattern: "a", Destination: "d", Transform: "1"},
		RouteSpec{Pattern: "a", Destination: "d", Transform: "1", OnError: OnErrorSkip},
	)
	for i, want := range []bool{false, true, false, true} {
		rt := r.Routes()[i]
		if rt.Conditional() != want {
			t.Errorf("routes[%d].Conditional() = %v", i, !want)
		}
	}
	if r.Routes()[0].OnError != OnErrorDead {
		t.Errorf("default OnError = %q", r.Routes()[0].OnError)
	}
}

func TestPlainRouteDoesNotAllocate(t *testing.T) {
	r := mustNew(t,
		RouteSpec{Pattern: "invoice.*", Destination: "x", When: `payload.a == 1`},
		RouteSpec{Pattern: "order.**", Destination: "events"},
	)
	m := exprMessage()
	allocs := testing.AllocsPerRun(100, func() {
		if d, err := r.Route(m); err != nil || d != "events" {
			t.Fatal(d, err)
		}
	})
	if allocs != 0 {
		t.Errorf("Route allocates %v times for a route without expressions", allocs)
	}
}

func FuzzExpr(f *testing.F) {
	f.Add(`payload.a.b == "x"`, `omit(payload, "a")`, []byte(`{"a":{"b":"x"}}`))
	f.Add(`headers.tenant in ["a", "b"] and attempt < 3`, `{"w": payload}`, []byte(`[1,2,3]`))
	f.Add(`len(payload) > 1`, `payload[0]`, []byte(`"s"`))
	f.Fuzz(func(t *testing.T, when, transform string, payload []byte) {
		r, err := New([]RouteSpec{
			{Pattern: "**", Destination: "d", When: when, Transform: transform, OnError: OnErrorRetry},
		})
		if err != nil {
			return
		}
		m := exprMessage()
		m.Payload = payload
		d, err := r.Route(m)
		switch {
		case err == nil && d != "d":
			t.Fatalf("Route = %q", d)
		case err != nil && outbox.IsPermanent(err) && !errors.Is(err, outbox.ErrNoRoute):
			t.Fatalf("retry policy gave a permanent error: %v", err)
		}
	})
}

func BenchmarkRoute(b *testing.B) {
	plain := []RouteSpec{
		{Pattern: "invoice.*", Destination: "ledger"},
		{Pattern: "payment.*", Destination: "billing"},
		{Pattern: "order.**", Destination: "events"},
	}
	cases := []struct {
		name  string
		specs []RouteSpec
	}{
		{"plain", plain},
		{"when-headers", append(plain[:2:2], RouteSpec{Pattern: "order.**", Destination: "events", When: `headers.tenant == "acme" && attempt < 3`})},
		{"when-payload", append(plain[:2:2], RouteSpec{Pattern: "order.**", Destination: "events", When: `payload.customer.region == "eu"`})},
		{"transform", append(plain[:2:2], RouteSpec{Pattern: "order.**", Destination: "events", Transform: `omit(payload, "card")`})},
		{"when+transform", append(plain[:2:2], RouteSpec{Pattern: "order.**", Destination: "events",
			When: `payload.amount > 10`, Transform: `{"id": id, "data": omit(payload, "card")}`})},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			r := mustNew(b, c.specs...)
			src := exprMessage()
			b.ReportAllocs()
			for b.Loop() {
				m := *src
				if d, err := r.Route(&m); err != nil || d != "events" {
					b.Fatal(d, err)
				}
			}
		})
	}
}
