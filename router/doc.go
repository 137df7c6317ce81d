// Package router decides where a row goes: topic patterns
// (address.Pattern) matched in order, first match wins, and optional
// expressions per route (a when: filter and a transform: of the delivered
// body, compiled with expr-lang/expr; see docs/routing.md).
package router
