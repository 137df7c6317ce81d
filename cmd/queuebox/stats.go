package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/queuebox/queuebox/dialect"
)

// statsJSON is the shape of `stats --output json` (docs/operations.md).
type statsJSON struct {
	States                  map[string]int64 `json:"states"`
	OldestPendingAgeSeconds float64          `json:"oldestPendingAgeSeconds"`
	Backlog                 []backlogJSON    `json:"backlog"`
	HeldKeys                []heldKeyJSON    `json:"heldKeys"`
}

type backlogJSON struct {
	Topic                   string  `json:"topic"`
	Pending                 int64   `json:"pending"`
	OldestPendingAgeSeconds float64 `json:"oldestPendingAgeSeconds"`
}

type heldKeyJSON struct {
	Key     string `json:"key"`
	DeadID  string `json:"deadId"`
	Waiting int64  `json:"waiting"`
}

func newStatsCmd(g *globalFlags) *cobra.Command {
	var (
		output    string
		top, held int
	)
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Counts by state, oldest pending age, backlog per topic, held keys",
		Long: `stats prints the rows per state, the age of the oldest due pending row (on the
database clock), the pending backlog of the --top topics with the most pending
rows, and the keys held by a dead row (relay.onDead: hold) with how many rows
wait behind it.

--output json prints {"states": {"pending": n, "processing": n, "sent": n,
"dead": n}, "oldestPendingAgeSeconds": s, "backlog": [{"topic", "pending",
"oldestPendingAgeSeconds"}], "heldKeys": [{"key", "deadId", "waiting"}]}.`,
		Example: `  queuebox stats
  queuebox stats --output json | jq .oldestPendingAgeSeconds`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if top < 0 || held < 0 {
				return usagef("--top and --held-keys must not be negative")
			}
			odb, err := openInspector(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer odb.close()
			st, err := odb.in.Stats(cmd.Context(), dialect.StatsParams{TopTopics: top, HeldKeys: held})
			if err != nil {
				return fmt.Errorf("stats: %w", err)
			}
			js := statsJSON{
				States:                  st.ByState,
				OldestPendingAgeSeconds: st.OldestPendingAge.Seconds(),
				Backlog:                 make([]backlogJSON, len(st.Backlog)),
				HeldKeys:                make([]heldKeyJSON, len(st.HeldKeys)),
			}
			for i, b := range st.Backlog {
				js.Backlog[i] = backlogJSON{Topic: b.Topic, Pending: b.Pending, OldestPendingAgeSeconds: b.OldestPendingAge.Seconds()}
			}
			for i, h := range st.HeldKeys {
				js.HeldKeys[i] = heldKeyJSON{Key: h.Key, DeadID: h.DeadID, Waiting: h.Waiting}
			}
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), js)
			}
			return printStats(cmd.OutOrStdout(), js, odb.cfg.Relay.OnDead == "hold")
		},
	}
	f := cmd.Flags()
	f.StringVarP(&output, "output", "o", "table", "table or json")
	f.IntVar(&top, "top", 10, "topics to list in the backlog")
	f.IntVar(&held, "held-keys", 20, "held keys to list")
	return cmd
}

func printStats(w io.Writer, st statsJSON, hold bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STATE\tROWS")
	for _, s := range []string{"pending", "processing", "sent", "dead"} {
		fmt.Fprintf(tw, "%s\t%d\n", s, st.States[s])
	}
	fmt.Fprintf(tw, "\noldest due pending row: %s\n", age(st.OldestPendingAgeSeconds))
	if len(st.Backlog) > 0 {
		fmt.Fprintln(tw, "\nTOPIC\tPENDING\tOLDEST_DUE")
		for _, b := range st.Backlog {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", b.Topic, b.Pending, age(b.OldestPendingAgeSeconds))
		}
	}
	switch {
	case len(st.HeldKeys) > 0:
		fmt.Fprintln(tw, "\nHELD_KEY\tDEAD_ROW\tWAITING")
		for _, h := range st.HeldKeys {
			fmt.Fprintf(tw, "%s\t%s\t%d\n", oneLine(h.Key, 60), h.DeadID, h.Waiting)
		}
	case hold:
		fmt.Fprintln(tw, "\nno held keys")
	}
	return tw.Flush()
}

func age(s float64) string {
	if s <= 0 {
		return "-"
	}
	return (time.Duration(s * float64(time.Second))).Round(time.Second).String()
}
