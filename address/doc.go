// Package address holds what says where a row goes, with the standard
// library only: topic patterns (Pattern, matched by the router's routes
// and checked by the dialects) and address templates (Template: a subject,
// topic, routing key or URL rendered from the row), each value escaped or
// checked for where it lands (RenderEscaped, TokenRule, EscapeURLValue) by
// the destination that owns the address.
package address
