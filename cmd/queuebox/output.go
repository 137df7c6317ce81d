package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// outputFormat is the value of -o/--output: text, for people (the
// default; "table" is an older name of it), or json, one document on
// stdout whose schema docs/cli.md describes. Logs and progress go to
// stderr either way.
type outputFormat string

const (
	outputText outputFormat = "text"
	outputJSON outputFormat = "json"
)

func (o *outputFormat) String() string { return string(*o) }

// Set accepts text, table (the same) and json; anything else is a usage
// error (exit 2) naming the choices.
func (o *outputFormat) Set(v string) error {
	switch v {
	case "text", "table":
		*o = outputText
	case "json":
		*o = outputJSON
	default:
		return fmt.Errorf("want text or json")
	}
	return nil
}

func (o *outputFormat) Type() string { return "format" }

// addOutputFlag adds -o/--output to cmd, text by default.
func addOutputFlag(cmd *cobra.Command, o *outputFormat) {
	*o = outputText
	cmd.Flags().VarP(o, "output", "o", "output format: text or json (one JSON document on stdout)")
}

func (o outputFormat) json() bool { return o == outputJSON }

// printJSON writes v as one indented JSON document.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
