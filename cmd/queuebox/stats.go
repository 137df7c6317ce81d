package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/dialect/postgres"
)

// statsJSON is the shape of `stats --output json` (docs/operations.md).
type statsJSON struct {
	States                  map[string]int64 `json:"states"`
	OldestPendingAgeSeconds float64          `json:"oldestPendingAgeSeconds"`
	Backlog                 []backlogJSON    `json:"backlog"`
	HeldKeys                []heldKeyJSON    `json:"heldKeys"`
	// OldestProcessingAgeSeconds (since the oldest processing row was
	// claimed) and ExpiredLeases (processing rows whose lease has expired)
	// describe the rows being delivered; absent when the dialect does not
	// read them (SQL Server).
	OldestProcessingAgeSeconds *float64 `json:"oldestProcessingAgeSeconds,omitempty"`
	ExpiredLeases              *int64   `json:"expiredLeases,omitempty"`
	// Circuits are the destinations' circuit breakers of the relay at
	// server.listen (or --relay), when one answers; absent otherwise.
	Circuits map[string]string `json:"circuits,omitempty"`
	// Buckets is the group of relay.claimMode: buckets; absent in the
	// other modes.
	Buckets *bucketsJSON `json:"buckets,omitempty"`
}

// bucketsJSON is bucket mode's group: its members and the buckets no
// member owns.
type bucketsJSON struct {
	Members []bucketMemberJSON `json:"members"`
	Unowned int                `json:"unowned"`
}

type bucketMemberJSON struct {
	Member string `json:"member"`
	Name   string `json:"name"`
	Live   bool   `json:"live"`
	// ExpiresInSeconds is how long the membership still runs; negative:
	// it ended that long ago, and its buckets wait for a live relay to
	// take them.
	ExpiresInSeconds float64 `json:"expiresInSeconds"`
	Buckets          int     `json:"buckets"`
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
		output    outputFormat
		top, held int
		relayAddr string
	)
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Counts by state, oldest pending age, backlog per topic, held keys",
		Long: `stats prints the rows per state, the age of the oldest due pending row (on the
database clock), the pending backlog of the --top topics with the most pending
rows, and the keys held by a dead row (relay.onDead: hold) with how many rows
wait behind it.

-o json prints {"states": {"pending": n, "processing": n, "sent": n,
"dead": n}, "oldestPendingAgeSeconds": s, "backlog": [{"topic", "pending",
"oldestPendingAgeSeconds"}], "heldKeys": [{"key", "deadId", "waiting"}],
"oldestProcessingAgeSeconds": s, "expiredLeases": n,
"circuits": {"<destination>": "closed"|"open"|"half-open"},
"buckets": {"members": [{"member", "name", "live", "expiresInSeconds",
"buckets"}], "unowned": n}}; buckets only in bucket mode
(relay.claimMode: buckets), where rows out stay pending: the relays that own
the buckets, and how long each membership still runs (negative: it ended,
and its keys wait until a live relay takes its buckets).

A processing row (claimed, being published) holds its key. One whose relay
crashed stays processing until its lease expires and a relay returns it to
pending (relay.lease, then relay.reapInterval): "oldest processing row" and
the expired leases say whether that is what the key's later rows wait for.

The circuit breakers live in each relay process, not in the table: stats asks
the relay at server.listen of the config (or --relay host:port) for them, and
leaves them out when none answers within a second.`,
		Example: `  queuebox stats
  queuebox stats -o json | jq .oldestPendingAgeSeconds`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
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
			if p := st.Processing; p != nil {
				age := p.OldestClaimAge.Seconds()
				js.OldestProcessingAgeSeconds, js.ExpiredLeases = &age, &p.ExpiredLeases
			}
			for i, b := range st.Backlog {
				js.Backlog[i] = backlogJSON{Topic: b.Topic, Pending: b.Pending, OldestPendingAgeSeconds: b.OldestPendingAge.Seconds()}
			}
			for i, h := range st.HeldKeys {
				js.HeldKeys[i] = heldKeyJSON{Key: h.Key, DeadID: h.DeadID, Waiting: h.Waiting}
			}
			if relayAddr == "" {
				relayAddr = odb.cfg.Server.Listen
			}
			js.Circuits = relayCircuits(cmd.Context(), relayAddr)
			if bd, ok := odb.db.(*postgres.BucketDialect); ok {
				members, unowned, err := bd.Members(cmd.Context())
				if err != nil {
					return fmt.Errorf("stats: %w", err)
				}
				js.Buckets = &bucketsJSON{Members: make([]bucketMemberJSON, len(members)), Unowned: unowned}
				for i, m := range members {
					js.Buckets.Members[i] = bucketMemberJSON{Member: m.Member, Name: m.Name, Live: m.Live,
						ExpiresInSeconds: m.Expires.Seconds(), Buckets: m.Buckets}
				}
			}
			if output.json() {
				return printJSON(cmd.OutOrStdout(), js)
			}
			return printStats(cmd.OutOrStdout(), js, odb.cfg.Relay.OnDead == "hold", odb.cfg.Relay.ReapInterval.D())
		},
	}
	f := cmd.Flags()
	addInboxFlag(f, g)
	addOutputFlag(cmd, &output)
	f.IntVar(&top, "top", 10, "topics to list in the backlog")
	f.IntVar(&held, "held-keys", 20, "held keys to list")
	f.StringVar(&relayAddr, "relay", "", "host:port of a running relay's management server to ask for circuit states (default: server.listen)")
	return cmd
}

func printStats(w io.Writer, st statsJSON, hold bool, reapInterval time.Duration) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STATE\tROWS")
	for _, s := range []string{"pending", "processing", "sent", "dead"} {
		fmt.Fprintf(tw, "%s\t%d\n", s, st.States[s])
	}
	fmt.Fprintf(tw, "\noldest due pending row: %s\n", age(st.OldestPendingAgeSeconds))
	if st.OldestProcessingAgeSeconds != nil && st.States["processing"] > 0 {
		// A processing row holds its key: the key's later rows wait for it.
		fmt.Fprintf(tw, "oldest processing row: claimed %s ago", age(*st.OldestProcessingAgeSeconds))
		if n := *st.ExpiredLeases; n > 0 {
			fmt.Fprintf(tw, "; %d with an expired lease (their relay stopped renewing: a relay returns them to pending within relay.reapInterval, %s)", n, reapInterval)
		}
		fmt.Fprintln(tw)
	}
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
	if b := st.Buckets; b != nil {
		// Bucket mode: rows out are still pending; who owns which keys is
		// what a stalled key may wait for.
		fmt.Fprintln(tw, "\nRELAY (bucket mode)\tBUCKETS\tMEMBERSHIP")
		for _, m := range b.Members {
			state := fmt.Sprintf("ends in %s", age(m.ExpiresInSeconds))
			if !m.Live {
				state = fmt.Sprintf("ended %s ago: a live relay takes its buckets at its next review", age(-m.ExpiresInSeconds))
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\n", oneLine(m.Name+" "+m.Member, 60), m.Buckets, state)
		}
		if b.Unowned > 0 {
			fmt.Fprintf(tw, "(no relay)\t%d\t-\n", b.Unowned)
		}
	}
	if len(st.Circuits) > 0 {
		fmt.Fprintln(tw, "\nDESTINATION\tCIRCUIT")
		names := make([]string, 0, len(st.Circuits))
		for n := range st.Circuits {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(tw, "%s\t%s\n", n, st.Circuits[n])
		}
	}
	return tw.Flush()
}

// relayCircuits asks the relay's management server at addr for its
// destinations' circuit states (from /health/ready). It returns nil when no
// relay answers within a second: stats reads the table and works without
// one.
func relayCircuits(ctx context.Context, addr string) map[string]string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "0" || port == "" {
		return nil
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/health/ready", nil)
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var body struct {
		Components map[string]componentHealth `json:"components"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil
	}
	out := map[string]string{}
	for name, c := range body.Components {
		if dest, ok := strings.CutPrefix(name, "destination."); ok && c.Circuit != "" {
			out[dest] = c.Circuit
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func age(s float64) string {
	if s <= 0 {
		return "-"
	}
	return (time.Duration(s * float64(time.Second))).Round(time.Second).String()
}
