package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// cliPage is the command-line reference; the part between the markers is
// generated from the cobra commands.
const (
	cliPage     = "../../docs/cli.md"
	beginMarker = "<!-- BEGIN GENERATED: go generate ./cmd/queuebox (make docs) -->\n"
	endMarker   = "<!-- END GENERATED -->\n"
)

var updateDocs = flag.Bool("update", false, "rewrite the generated part of docs/cli.md from the commands")

// TestCLIReference fails when docs/cli.md does not describe the commands
// as they are: every command, its usage, summary, examples and flags. Run
// go generate ./cmd/queuebox (or make docs) to rewrite it.
func TestCLIReference(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile(cliPage)
	if err != nil {
		t.Fatal(err)
	}
	i, j := bytes.Index(page, []byte(beginMarker)), bytes.Index(page, []byte(endMarker))
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers %q and %q", cliPage, beginMarker, endMarker)
	}
	want := cliReference(newRootCmd())
	got := string(page[i+len(beginMarker) : j])
	if got == want {
		return
	}
	if *updateDocs {
		out := string(page[:i+len(beginMarker)]) + want + string(page[j:])
		if err := os.WriteFile(cliPage, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s does not describe the commands as they are: run go generate ./cmd/queuebox (make docs)\n%s", cliPage, firstDifference(got, want))
}

// firstDifference shows the first line where got and want differ.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for k := 0; k < max(len(g), len(w)); k++ {
		var gl, wl string
		if k < len(g) {
			gl = g[k]
		}
		if k < len(w) {
			wl = w[k]
		}
		if gl != wl {
			return fmt.Sprintf("line %d of the generated part:\n  page:     %q\n  commands: %q", k+1, gl, wl)
		}
	}
	return ""
}

// cliReference is the generated part of docs/cli.md: the global flags,
// then each command with its usage, summary, examples and flags.
func cliReference(root *cobra.Command) string {
	var b strings.Builder
	b.WriteString("\n## Global flags\n\nEvery command takes these.\n\n")
	writeFlags(&b, root.PersistentFlags())
	for _, c := range documentedCommands(root) {
		writeCommand(&b, c)
	}
	b.WriteString("\n")
	return b.String()
}

// documentedCommands are the commands of root, depth first in name order,
// without help and completion (cobra's own) and without those that only
// group others (dead).
func documentedCommands(root *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	for _, c := range root.Commands() {
		if !c.IsAvailableCommand() || c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		if !c.HasSubCommands() || c.HasAvailableLocalFlags() {
			out = append(out, c)
		}
		out = append(out, documentedCommands(c)...)
	}
	return out
}

// writeCommand writes one command: its usage and summary, its examples
// and its flags. Its long description is its --help (and operations.md).
func writeCommand(b *strings.Builder, c *cobra.Command) {
	json := ""
	if c.Flags().Lookup("output") != nil {
		json = " Takes `-o text|json`."
	}
	fmt.Fprintf(b, "\n## %s\n\n`%s`: %s.%s\n", c.CommandPath(), c.UseLine(), markdownText(c.Short), json)
	if c.Example != "" {
		fmt.Fprintf(b, "\n```\n%s\n```\n", strings.TrimRight(c.Example, "\n"))
	}
	if fs := c.NonInheritedFlags(); tableFlags(fs) > 0 {
		b.WriteString("\n")
		writeFlags(b, fs)
	}
}

// writeFlags writes a table of the visible flags of fs.
func writeFlags(b *strings.Builder, fs *pflag.FlagSet) {
	b.WriteString("| flag | default | meaning |\n|---|---|---|\n")
	fs.VisitAll(func(f *pflag.Flag) {
		if !inTable(f) {
			return
		}
		name := "--" + f.Name
		if f.Shorthand != "" {
			name = "-" + f.Shorthand + ", " + name
		}
		if typ, _ := pflag.UnquoteUsage(f); typ != "" {
			name += " " + typ
		}
		def := f.DefValue
		switch {
		case def == "" || def == "[]" || def == "false" || strings.Contains(f.Usage, "(env "):
			// No default, or one read from the environment of the
			// machine that generates the page.
			def = ""
		default:
			def = "`" + def + "`"
		}
		_, usage := pflag.UnquoteUsage(f)
		fmt.Fprintf(b, "| `%s` | %s | %s |\n", name, def, markdownText(usage))
	})
}

// inTable reports whether f has a row in a flag table: -o is named in the
// command's line and under Output.
func inTable(f *pflag.Flag) bool { return !f.Hidden && f.Name != "help" && f.Name != "output" }

// tableFlags is how many flags of fs have a row.
func tableFlags(fs *pflag.FlagSet) int {
	n := 0
	fs.VisitAll(func(f *pflag.Flag) {
		if inTable(f) {
			n++
		}
	})
	return n
}

// markdownText escapes the characters Markdown would read as markup.
func markdownText(s string) string {
	r := strings.NewReplacer(`\`, `\\`, "*", `\*`, "_", `\_`, "|", `\|`, "<", `\<`, ">", `\>`, "`", "\\`")
	return r.Replace(strings.TrimSpace(s))
}

// TestCLIReferenceDocumentsTheJSON: every field of every -o json document
// is named in docs/cli.md.
func TestCLIReferenceDocumentsTheJSON(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile(cliPage)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []any{checkReport{}, checkFinding{}, statsJSON{}, backlogJSON{}, heldKeyJSON{}, bucketsJSON{}, bucketMemberJSON{}, deadRowJSON{},
		deadReleaseJSON{}, replayJSON{}, duplicateWindowJSON{}, migrateStatusJSON{}, migrationJSON{}, migrateUpJSON{},
		appliedJSON{}, buildInfo{}, demoReport{}, demoCheck{}} {
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			if !bytes.Contains(page, []byte(`"`+name+`"`)) {
				t.Errorf("%s.%s: %s does not name the JSON field %q", typ.Name(), typ.Field(i).Name, cliPage, name)
			}
		}
	}
}
