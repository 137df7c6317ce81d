package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// Set at build time by make build and make release:
//
//	-X main.version=v0.1.0 -X main.revision=<commit> -X main.buildDate=<RFC 3339>
//
// A build without them (go build, go install …@v0.1.0) reads what the Go
// build information holds instead: see readBuildInfo.
var (
	version   string
	revision  string
	buildDate string
)

// buildInfo is what `queuebox version` prints and queuebox_build_info
// carries.
type buildInfo struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	BuildDate string `json:"buildDate"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// unknown stands for what neither the linker flags nor the build
// information say.
const unknown = "unknown"

// currentBuild returns the build's identity: the linker flags first, then
// the Go build information.
func currentBuild() buildInfo {
	bi, _ := debug.ReadBuildInfo()
	return readBuildInfo(version, revision, buildDate, bi)
}

// readBuildInfo fills what the linker flags left empty from bi: the main
// module's version (set by go install …@v0.1.0, and by go build in a git
// checkout: a pseudo-version), vcs.revision with "-dirty" when vcs.modified,
// and vcs.time (the commit's time: a release's build date is its commit's
// time too, so that two builds of a commit are the same bytes).
func readBuildInfo(version, revision, date string, bi *debug.BuildInfo) buildInfo {
	b := buildInfo{Version: version, Revision: revision, BuildDate: date,
		GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		var rev, at string
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if b.Revision == "" && rev != "" {
			b.Revision = rev
			if modified {
				b.Revision += "-dirty"
			}
		}
		if b.BuildDate == "" {
			b.BuildDate = at
		}
		if bi.GoVersion != "" {
			b.GoVersion = bi.GoVersion
		}
	}
	if b.Version == "" {
		b.Version = "devel"
	}
	if b.Revision == "" {
		b.Revision = unknown
	}
	if b.BuildDate == "" {
		b.BuildDate = unknown
	}
	return b
}

func newVersionCmd() *cobra.Command {
	var output outputFormat
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, revision, build date and Go version",
		Long: `version prints what this binary was built from. A release build carries its
version, commit and the commit's date; a build without them (go build, go
install) reads what Go recorded: the module version, the commit (with
-dirty for uncommitted changes) and its date.

-o json prints {"version", "revision", "buildDate", "goVersion", "platform"}.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			b := currentBuild()
			out := cmd.OutOrStdout()
			if output.json() {
				return printJSON(out, b)
			}
			tw := tabwriter.NewWriter(out, 0, 0, 1, ' ', 0)
			fmt.Fprintf(tw, "queuebox %s\n", b.Version)
			fmt.Fprintf(tw, "  revision:\t%s\n", b.Revision)
			fmt.Fprintf(tw, "  build date:\t%s\n", b.BuildDate)
			fmt.Fprintf(tw, "  go:\t%s\n", b.GoVersion)
			fmt.Fprintf(tw, "  platform:\t%s\n", b.Platform)
			return tw.Flush()
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}
