// Package router decides where a row goes: topic patterns matched in order
// (first match wins), optional expressions per route (a when: filter and a
// transform: of the delivered body, compiled with expr-lang/expr; see
// docs/routing.md) and address templates rendered from the row, each value
// escaped or checked for where it lands (RenderEscaped, TokenRule,
// EscapeURLValue) by the destination that owns the address. It imports
// the standard library and expr only.
package router
