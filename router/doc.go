// Package router decides where a row goes: topic patterns matched in order
// (first match wins) and address templates rendered from the row. It
// imports the standard library (and expr, for expression routes) only.
package router
