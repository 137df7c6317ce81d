package dialecttest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

// HoldHarness is implemented by harnesses that can build the dialect under
// test for relay.onDead: hold, on the same table. Without it the held-key
// tests are skipped.
type HoldHarness interface {
	HoldDialect() dialect.Dialect
}

// Ager is implemented by harnesses that can make a row look old: it moves
// the row's created_at, scheduled_at and updated_at back by the given
// duration. Without it the retention test is skipped.
type Ager interface {
	Age(ctx context.Context, id string, by time.Duration) error
}

// runInspector runs the operator-surface tests: Inspector (stats, dead
// list, replay), KeyReleaser and Purger. Each is skipped when the dialect
// does not implement it.
func runInspector(t *testing.T, newHarness func(t *testing.T) Harness) {
	runTests(t, newHarness, inspectorTests, true)
}

// inspectorTests are the tests of the operator surface.
var inspectorTests = []suiteTest{
	{"InspectStats", testStats, true},
	{"InspectDeadList", testDeadList, false},
	{"InspectReplay", testReplay, false},
	{"InspectReplaySent", testReplaySent, false},
	{"InspectReplayLeavesAKeyInFlight", testReplayLeavesAKeyInFlight, true},
	{"InspectReplayReportsProgress", testReplayProgress, false},
	{"InspectReplayTopics", testReplayTopics, false},
	{"HoldKeepsKeyUntilReplay", testHoldReplay, false},
	{"HoldReleaseKey", testHoldRelease, false},
	{"HoldFlagInDeadList", testHoldFlag, false},
	{"PurgeOldFinishedRows", testPurge, true},
}

func inspector(t *testing.T, d dialect.Dialect) dialect.Inspector {
	t.Helper()
	in, ok := d.(dialect.Inspector)
	if !ok {
		t.Skip("the dialect does not implement dialect.Inspector")
	}
	return in
}

// kill claims the given rows with d (they must be ready heads) and moves
// them to dead with reason why.
func kill(t *testing.T, ctx context.Context, d dialect.Dialect, why string, ids ...string) {
	t.Helper()
	token := newToken()
	msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: token, Limit: 1000, Lease: longLease})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	var items []dialect.DeadItem
	var release []string
	for _, m := range msgs {
		if slices.Contains(ids, m.ID) {
			items = append(items, dialect.DeadItem{ID: m.ID, Attempt: 3, Error: why})
		} else {
			release = append(release, m.ID)
		}
	}
	if len(items) != len(ids) {
		t.Fatalf("kill: claimed %d of the %d rows to kill", len(items), len(ids))
	}
	n, err := d.Dead(ctx, dialect.DeadParams{Token: token, Items: items})
	wantAffected(t, "dead", n, err, int64(len(ids)))
	n, err = d.Release(ctx, dialect.ReleaseParams{Token: token, IDs: release})
	wantAffected(t, "release", n, err, int64(len(release)))
}

// claimAll claims with d and completes what it got, returning the ids.
func claimComplete(t *testing.T, ctx context.Context, d dialect.Dialect) []string {
	t.Helper()
	token := newToken()
	msgs, err := d.Claim(ctx, dialect.ClaimParams{Token: token, Limit: 1000, Lease: longLease})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	ids := idsOf(msgs)
	n, err := d.Complete(ctx, dialect.CompleteParams{Token: token, IDs: ids})
	wantAffected(t, "complete", n, err, int64(len(ids)))
	return ids
}

func testStats(t *testing.T, h Harness) {
	ctx := testContext(t)
	in := inspector(t, h.Dialect())
	st, err := in.Stats(ctx, dialect.StatsParams{TopTopics: 10})
	if err != nil {
		t.Fatal(err)
	}
	if st.ByState["pending"] != 0 || st.OldestPendingAge != 0 || len(st.Backlog) != 0 {
		t.Fatalf("empty table: %+v", st)
	}
	ids := insert(t, ctx, h,
		Row{Topic: "a.one"}, Row{Topic: "a.one"}, Row{Topic: "a.one"},
		Row{Topic: "b.two"}, Row{Topic: "b.two"},
		Row{Topic: "c.three", Delay: time.Hour}, // pending, not due
	)
	kill(t, ctx, h.Dialect(), "boom", ids[0])
	token := newToken()
	claimed := claim(t, ctx, h, token, 1, longLease)
	if len(claimed) != 1 { // one processing
		t.Fatalf("claim = %v", claimed)
	}
	st, err = in.Stats(ctx, dialect.StatsParams{TopTopics: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"pending": 4, "processing": 1, "sent": 0, "dead": 1}
	for s, n := range want {
		if st.ByState[s] != n {
			t.Errorf("ByState[%s] = %d, want %d (%v)", s, st.ByState[s], n, st.ByState)
		}
	}
	if st.OldestPendingAge < 0 || st.OldestPendingAge > time.Minute {
		t.Errorf("OldestPendingAge = %v", st.OldestPendingAge)
	}
	if len(st.Backlog) != 2 {
		t.Fatalf("backlog = %+v, want the top 2 topics", st.Backlog)
	}
	// a.one: 1 dead, 1 processing (the lowest sequence pending was claimed
	// by the claim above), 1 pending; b.two: 2 pending; c.three: 1 pending.
	if st.Backlog[0].Topic != "b.two" || st.Backlog[0].Pending != 2 {
		t.Errorf("backlog[0] = %+v, want b.two with 2", st.Backlog[0])
	}
	if len(st.HeldKeys) != 0 {
		t.Errorf("held keys without hold: %+v", st.HeldKeys)
	}

	// The relay's gauges need no sent count: with one row sent, the other
	// counts are the same, and sent is either left out or right.
	n, err := h.Dialect().Complete(ctx, dialect.CompleteParams{Token: token, IDs: idsOf(claimed)})
	wantAffected(t, "complete", n, err, 1)
	gauges, err := in.Stats(ctx, dialect.StatsParams{WithoutSent: true})
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]int64{"pending": 4, "processing": 0, "sent": 1, "dead": 1}
	for s, n := range want {
		if got, ok := gauges.ByState[s]; (ok || s != "sent") && got != n {
			t.Errorf("WithoutSent: ByState[%s] = %d, want %d (%v)", s, got, n, gauges.ByState)
		}
	}
}

func testDeadList(t *testing.T, h Harness) {
	ctx := testContext(t)
	in := inspector(t, h.Dialect())
	ids := insert(t, ctx, h,
		Row{Topic: "order.created", Key: "k1"},
		Row{Topic: "order.eu.paid", Key: "k2"},
		Row{Topic: "invoice.sent"},
		Row{Topic: "orderXcreated"}, // a literal "." must not match any character
		Row{Topic: "order.created"}, // stays pending
	)
	kill(t, ctx, h.Dialect(), "http 500: internal error", ids[0], ids[1], ids[2], ids[3])
	list := func(p dialect.DeadListParams) []string {
		t.Helper()
		rows, err := in.DeadList(ctx, p)
		if err != nil {
			t.Fatalf("dead list %+v: %v", p, err)
		}
		out := make([]string, len(rows))
		for i, r := range rows {
			out[i] = r.ID
		}
		return out
	}
	all := list(dialect.DeadListParams{Limit: 10})
	if len(all) != 4 {
		t.Fatalf("dead list = %v, want 4 rows", all)
	}
	// Newest first: all died in one statement, so by sequence, descending.
	if !slices.Equal(all, []string{ids[3], ids[2], ids[1], ids[0]}) {
		t.Errorf("dead list order = %v, want newest first", all)
	}
	rows, err := in.DeadList(ctx, dialect.DeadListParams{Key: "k1"})
	if err != nil || len(rows) != 1 {
		t.Fatalf("by key: %+v %v", rows, err)
	}
	r := rows[0]
	if r.ID != ids[0] || r.Topic != "order.created" || r.Key != "k1" || r.Attempt != 3 || r.LastError != "http 500: internal error" || r.UpdatedAt.IsZero() || r.Held {
		t.Errorf("dead row = %+v", r)
	}
	cases := []struct {
		pattern string
		want    []string
	}{
		{"order.*", []string{ids[0]}},
		{"order.**", []string{ids[1], ids[0]}},
		{"*.sent", []string{ids[2]}},
		{"**", []string{ids[3], ids[2], ids[1], ids[0]}},
		{"order.created", []string{ids[0]}},
		{"nothing.*", []string{}},
	}
	for _, c := range cases {
		if got := list(dialect.DeadListParams{TopicPattern: c.pattern, Limit: 10}); !slices.Equal(got, c.want) {
			t.Errorf("topic %q: %v, want %v", c.pattern, got, c.want)
		}
	}
	if _, err := in.DeadList(ctx, dialect.DeadListParams{TopicPattern: "a.**.b"}); err == nil {
		t.Error("an invalid pattern was accepted")
	}
	if got := list(dialect.DeadListParams{Limit: 2}); len(got) != 2 {
		t.Errorf("limit 2: %v", got)
	}
	n := now(t, ctx, h)
	if got := list(dialect.DeadListParams{Since: n.Add(time.Hour)}); len(got) != 0 {
		t.Errorf("since in the future: %v", got)
	}
	if got := list(dialect.DeadListParams{Since: n.Add(-time.Hour), TopicPattern: "invoice.*"}); !slices.Equal(got, []string{ids[2]}) {
		t.Errorf("since an hour ago, invoice.*: %v", got)
	}
	// Durations are taken from the database clock (SinceAgo).
	hour, ahead := time.Hour, -time.Hour
	if got := list(dialect.DeadListParams{SinceAgo: &hour, TopicPattern: "invoice.*"}); !slices.Equal(got, []string{ids[2]}) {
		t.Errorf("since 1h ago on the database clock, invoice.*: %v", got)
	}
	if got := list(dialect.DeadListParams{SinceAgo: &ahead}); len(got) != 0 {
		t.Errorf("since an hour ahead of the database clock: %v", got)
	}
}

func testReplay(t *testing.T, h Harness) {
	ctx := testContext(t)
	in := inspector(t, h.Dialect())
	ids := insert(t, ctx, h,
		Row{Topic: "pay.a", Key: "k"}, Row{Topic: "pay.b"}, Row{Topic: "pay.c"}, Row{Topic: "other.a"})
	before := make([]RowState, len(ids))
	for i, id := range ids {
		before[i] = row(t, ctx, h, id)
	}
	kill(t, ctx, h.Dialect(), "poison", ids...)

	if _, err := in.Replay(ctx, dialect.ReplayParams{}); !errors.Is(err, dialect.ErrNoSelector) {
		t.Fatalf("replay without selector: %v, want ErrNoSelector", err)
	}
	if _, err := in.Replay(ctx, dialect.ReplayParams{State: "pending", Key: "k"}); err == nil {
		t.Error("replay of pending rows accepted")
	}
	if _, err := in.Replay(ctx, dialect.ReplayParams{IDs: []string{"not-a-uuid"}}); err == nil {
		t.Error("replay of a malformed id accepted")
	}
	n, err := in.Replay(ctx, dialect.ReplayParams{TopicPattern: "pay.*", DryRun: true})
	wantReplay(t, "dry run", n, err, 3, 0)
	if r := row(t, ctx, h, ids[0]); r.State != outbox.StateDead {
		t.Fatalf("dry run moved a row: %+v", r)
	}
	// AND: topic pay.* and key k is one row.
	n, err = in.Replay(ctx, dialect.ReplayParams{TopicPattern: "pay.*", Key: "k", DryRun: true})
	wantReplay(t, "dry run topic+key", n, err, 1, 0)
	n, err = in.Replay(ctx, dialect.ReplayParams{IDs: []string{ids[0], ids[3]}, TopicPattern: "pay.**", DryRun: true})
	wantReplay(t, "dry run ids+topic", n, err, 1, 0)
	db := now(t, ctx, h)
	n, err = in.Replay(ctx, dialect.ReplayParams{Until: db.Add(-time.Hour)})
	wantReplay(t, "replay until an hour ago", n, err, 0, 0)
	hour, twoHours := time.Hour, 2*time.Hour
	n, err = in.Replay(ctx, dialect.ReplayParams{UntilAgo: &hour})
	wantReplay(t, "replay until 1h ago on the database clock", n, err, 0, 0)
	n, err = in.Replay(ctx, dialect.ReplayParams{SinceAgo: &hour, TopicPattern: "pay.*", DryRun: true})
	wantReplay(t, "dry run since 1h ago on the database clock", n, err, 3, 0)
	if _, err := in.Replay(ctx, dialect.ReplayParams{SinceAgo: &hour, UntilAgo: &twoHours}); err == nil {
		t.Error("replay until 2h ago since 1h ago accepted")
	}

	// Batches of one: three statements.
	n, err = in.Replay(ctx, dialect.ReplayParams{TopicPattern: "pay.*", Since: db.Add(-time.Hour), BatchSize: 1})
	wantReplay(t, "replay pay.*", n, err, 3, 3)
	for i, id := range ids[:3] {
		r := row(t, ctx, h, id)
		if r.State != outbox.StatePending || r.Attempt != 0 || r.LastError != nil || r.ClaimToken != "" || r.LeaseExpiresAt != nil {
			t.Errorf("replayed row %d: %+v", i, r)
		}
		if r.Sequence != before[i].Sequence {
			t.Errorf("replayed row %d: sequence %d, was %d", i, r.Sequence, before[i].Sequence)
		}
		if r.ScheduledAt.After(now(t, ctx, h)) {
			t.Errorf("replayed row %d is not due now: %v", i, r.ScheduledAt)
		}
	}
	if r := row(t, ctx, h, ids[3]); r.State != outbox.StateDead {
		t.Errorf("other.a was replayed: %+v", r)
	}
	// Replayed rows are claimable again, with the same ids.
	got := claimComplete(t, ctx, h.Dialect())
	slices.Sort(got)
	want := slices.Clone(ids[:3])
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("claimed after replay %v, want %v", got, want)
	}
	// Nothing left to replay with that selector.
	n, err = in.Replay(ctx, dialect.ReplayParams{TopicPattern: "pay.*"})
	wantReplay(t, "replay again", n, err, 0, 0)
}

func testReplaySent(t *testing.T, h Harness) {
	ctx := testContext(t)
	in := inspector(t, h.Dialect())
	ids := insert(t, ctx, h, Row{Topic: "s.a"}, Row{Topic: "s.b"})
	claimComplete(t, ctx, h.Dialect())
	n, err := in.Replay(ctx, dialect.ReplayParams{IDs: ids[:1]})
	wantReplay(t, "replay of a sent row as dead", n, err, 0, 0)
	n, err = in.Replay(ctx, dialect.ReplayParams{State: "sent", IDs: ids[:1]})
	wantReplay(t, "replay sent", n, err, 1, 1)
	if r := row(t, ctx, h, ids[0]); r.State != outbox.StatePending || r.ClaimToken != "" {
		t.Errorf("replayed sent row: %+v", r)
	}
	if r := row(t, ctx, h, ids[1]); r.State != outbox.StateSent {
		t.Errorf("unselected sent row: %+v", r)
	}
}

// testReplayLeavesAKeyInFlight: a dead row whose key has a later row
// processing is selected but not moved (moved back, it would be its key's
// head while that row is out: two rows of one key in flight); the result
// says so, and the replay after that row is sent moves it.
func testReplayLeavesAKeyInFlight(t *testing.T, h Harness) {
	ctx := testContext(t)
	d := h.Dialect()
	in := inspector(t, d)
	ids := insert(t, ctx, h, Row{Topic: "in.a", Key: "k"}, Row{Topic: "in.b", Key: "k"}, Row{Topic: "in.c", Key: "other"})
	kill(t, ctx, d, "poison", ids[0], ids[2])
	// The dead head released k: its next row is claimed, and stays out.
	token := newToken()
	out := claim(t, ctx, h, token, 10, longLease)
	if len(out) != 1 || out[0].ID != ids[1] {
		t.Fatalf("claimed %v, want only k's second row %s", idsOf(out), ids[1])
	}
	dry, err := in.Replay(ctx, dialect.ReplayParams{TopicPattern: "in.*", DryRun: true})
	wantReplay(t, "dry run beside a row in flight", dry, err, 2, 0)
	res, err := in.Replay(ctx, dialect.ReplayParams{TopicPattern: "in.*"})
	wantReplay(t, "replay beside a row in flight", res, err, 2, 1)
	if res.Left() != 1 {
		t.Errorf("left %d rows, want 1", res.Left())
	}
	if r := row(t, ctx, h, ids[0]); r.State != outbox.StateDead {
		t.Fatalf("k's dead row was replayed while k's next row is processing: %+v", r)
	}
	if r := row(t, ctx, h, ids[2]); r.State != outbox.StatePending {
		t.Fatalf("the other key's dead row: %+v, want pending", r)
	}
	n, err := d.Complete(ctx, dialect.CompleteParams{Token: token, IDs: []string{ids[1]}})
	wantAffected(t, "complete k's row in flight", n, err, 1)
	res, err = in.Replay(ctx, dialect.ReplayParams{TopicPattern: "in.*"})
	wantReplay(t, "replay once k's row is sent", res, err, 1, 1)
	if r := row(t, ctx, h, ids[0]); r.State != outbox.StatePending {
		t.Fatalf("k's dead row after its key's row was sent: %+v, want pending", r)
	}
}

// wantReplay fails the test unless the replay succeeded and selected and
// moved the rows it should.
func wantReplay(t *testing.T, what string, got dialect.ReplayResult, err error, selected, moved int64) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got != (dialect.ReplayResult{Selected: selected, Moved: moved}) {
		t.Fatalf("%s: selected %d and moved %d rows, want %d and %d", what, got.Selected, got.Moved, selected, moved)
	}
}

func holdDialect(t *testing.T, h Harness) dialect.Dialect {
	t.Helper()
	hh, ok := h.(HoldHarness)
	if !ok {
		t.Skip("the harness cannot build a dialect that holds keys")
	}
	return hh.HoldDialect()
}

// testHoldReplay: with hold, key K's head dies; K's later rows stay pending
// (visible as a held key) while other keys flow; replaying the head
// delivers the whole key in order.
func testHoldReplay(t *testing.T, h Harness) {
	ctx := testContext(t)
	d := holdDialect(t, h)
	in := inspector(t, d)
	ids := insert(t, ctx, h, Row{Key: "K"}, Row{Key: "K"}, Row{Key: "K"}, Row{Key: "other"}, Row{})
	kill(t, ctx, d, "poison", ids[0])

	got := claimComplete(t, ctx, d)
	slices.Sort(got)
	want := []string{ids[3], ids[4]}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("claimed %v while K is held, want only %v", got, want)
	}
	if got := claimComplete(t, ctx, d); len(got) != 0 {
		t.Fatalf("claimed %v from a held key", got)
	}
	for _, id := range ids[1:3] {
		if r := row(t, ctx, h, id); r.State != outbox.StatePending {
			t.Fatalf("waiting row %s: %+v", id, r)
		}
	}
	st, err := in.Stats(ctx, dialect.StatsParams{HeldKeys: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.HeldKeys) != 1 || st.HeldKeys[0] != (dialect.HeldKey{Key: "K", DeadID: ids[0], Waiting: 2}) {
		t.Fatalf("held keys = %+v, want K held by %s with 2 waiting", st.HeldKeys, ids[0])
	}
	dead, err := in.DeadList(ctx, dialect.DeadListParams{})
	if err != nil || len(dead) != 1 || !dead[0].Held {
		t.Fatalf("dead list = %+v (%v), want the held head", dead, err)
	}
	// The release-mode dialect on the same table ignores the hold.
	if _, ok := h.Dialect().(dialect.Inspector); ok {
		st, err := h.Dialect().(dialect.Inspector).Stats(ctx, dialect.StatsParams{HeldKeys: 10})
		if err != nil || len(st.HeldKeys) != 0 {
			t.Errorf("release-mode stats: held keys %+v (%v)", st.HeldKeys, err)
		}
	}

	n, err := in.Replay(ctx, dialect.ReplayParams{IDs: ids[:1]})
	wantReplay(t, "replay head", n, err, 1, 1)
	var order []string
	for range 3 {
		got := claimComplete(t, ctx, d)
		if len(got) != 1 {
			t.Fatalf("claim after replay = %v, want one row of K at a time", got)
		}
		order = append(order, got[0])
	}
	if !slices.Equal(order, ids[:3]) {
		t.Fatalf("K delivered as %v, want %v", order, ids[:3])
	}
	st, err = in.Stats(ctx, dialect.StatsParams{HeldKeys: 10})
	if err != nil || len(st.HeldKeys) != 0 || st.ByState["sent"] != 5 {
		t.Fatalf("after replay: %+v (%v)", st, err)
	}
}

// testHoldRelease: with hold, releasing a held key lets its later rows flow
// while the dead row stays dead; an unkeyed dead row holds nothing.
func testHoldRelease(t *testing.T, h Harness) {
	ctx := testContext(t)
	d := holdDialect(t, h)
	rel, ok := d.(dialect.KeyReleaser)
	if !ok {
		t.Skip("the dialect does not implement dialect.KeyReleaser")
	}
	ids := insert(t, ctx, h, Row{Key: "J"}, Row{Key: "J"}, Row{}, Row{})
	kill(t, ctx, d, "poison", ids[0], ids[2])
	if got := claimComplete(t, ctx, d); !slices.Equal(got, []string{ids[3]}) {
		t.Fatalf("claimed %v, want only the unkeyed row %s", got, ids[3])
	}
	n, err := rel.ReleaseKey(ctx, "nope")
	wantAffected(t, "release an unheld key", n, err, 0)
	n, err = rel.ReleaseKey(ctx, "J")
	wantAffected(t, "release J", n, err, 1)
	if got := claimComplete(t, ctx, d); !slices.Equal(got, []string{ids[1]}) {
		t.Fatalf("claimed %v after release, want %s", got, ids[1])
	}
	if r := row(t, ctx, h, ids[0]); r.State != outbox.StateDead {
		t.Fatalf("released dead row: %+v", r)
	}
	// A row of J written after the release flows too.
	later := insert(t, ctx, h, Row{Key: "J"})
	if got := claimComplete(t, ctx, d); !slices.Equal(got, later) {
		t.Fatalf("claimed %v, want %v", got, later)
	}
	if _, err := rel.ReleaseKey(ctx, ""); err == nil {
		t.Error("release of the empty key accepted")
	}
}

// testHoldFlag: with hold, dead list marks a keyed dead row held from its
// own hold, also when no later row of its key waits yet; a release clears
// it, and a dead row without a key is never held.
func testHoldFlag(t *testing.T, h Harness) {
	ctx := testContext(t)
	d := holdDialect(t, h)
	in := inspector(t, d)
	rel, ok := d.(dialect.KeyReleaser)
	if !ok {
		t.Skip("the dialect does not implement dialect.KeyReleaser")
	}
	ids := insert(t, ctx, h, Row{Key: "alone"}, Row{})
	kill(t, ctx, d, "poison", ids...)
	held := func() map[string]bool {
		t.Helper()
		rows, err := in.DeadList(ctx, dialect.DeadListParams{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, r := range rows {
			out[r.ID] = r.Held
		}
		return out
	}
	if got := held(); !got[ids[0]] || got[ids[1]] {
		t.Fatalf("held = %v, want %s (keyed, nothing waiting) held and %s (no key) not", got, ids[0], ids[1])
	}
	n, err := rel.ReleaseKey(ctx, "alone")
	wantAffected(t, "release", n, err, 1)
	if got := held(); got[ids[0]] {
		t.Fatalf("held = %v after the release", got)
	}
}

// testReplayTopics: a ReplaySummarizer counts the rows a replay would move
// per topic, with when the latest was sent, on the database clock.
func testReplayTopics(t *testing.T, h Harness) {
	ctx := testContext(t)
	sum, ok := h.Dialect().(dialect.ReplaySummarizer)
	if !ok {
		t.Skip("the dialect does not implement dialect.ReplaySummarizer")
	}
	insert(t, ctx, h, Row{Topic: "sum.a"}, Row{Topic: "sum.a"}, Row{Topic: "sum.b"}, Row{Topic: "other.a"})
	claimComplete(t, ctx, h.Dialect())
	got, err := sum.ReplayTopics(ctx, dialect.ReplayParams{State: "sent", TopicPattern: "sum.*"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Topics) != 2 || got.Topics[0].Topic != "sum.a" || got.Topics[0].Rows != 2 || got.Topics[1].Topic != "sum.b" || got.Topics[1].Rows != 1 {
		t.Fatalf("topics %+v, want sum.a: 2 and sum.b: 1", got.Topics)
	}
	for _, tp := range got.Topics {
		if age := got.Now.Sub(tp.LastUpdated); tp.LastUpdated.IsZero() || age < 0 || age > time.Minute {
			t.Errorf("%s: last updated %v, database now %v: want just before it", tp.Topic, tp.LastUpdated, got.Now)
		}
	}
	if got, err := sum.ReplayTopics(ctx, dialect.ReplayParams{State: "dead", TopicPattern: "sum.*"}); err != nil || len(got.Topics) != 0 || got.Now.IsZero() {
		t.Errorf("no dead rows: %+v (%v), want no topics and the database's now", got, err)
	}
	if _, err := sum.ReplayTopics(ctx, dialect.ReplayParams{State: "sent"}); !errors.Is(err, dialect.ErrNoSelector) {
		t.Errorf("without a selector: %v, want ErrNoSelector", err)
	}
}

// testReplayProgress: Replay reports its progress after each batch, and
// the last report says every selected row was handled.
func testReplayProgress(t *testing.T, h Harness) {
	ctx := testContext(t)
	in := inspector(t, h.Dialect())
	ids := insert(t, ctx, h, Row{Topic: "prog.a"}, Row{Topic: "prog.a"}, Row{Topic: "prog.a"}, Row{Topic: "prog.a"}, Row{Topic: "prog.a"})
	kill(t, ctx, h.Dialect(), "poison", ids...)
	type report struct{ done, total int64 }
	var got []report
	p := dialect.ReplayParams{TopicPattern: "prog.*", BatchSize: 2, Progress: func(done, total int64) { got = append(got, report{done, total}) }}
	res, err := in.Replay(ctx, p)
	wantReplay(t, "replay", res, err, 5, 5)
	if len(got) == 0 || got[len(got)-1] != (report{5, 5}) {
		t.Fatalf("progress %v, want it to end at 5 of 5", got)
	}
	batches := 0
	for i, r := range got {
		if i > 0 && r.done < got[i-1].done {
			t.Fatalf("progress went back: %v", got)
		}
		if r.done > 0 {
			batches++
		}
	}
	if batches != 3 {
		t.Errorf("progress %v: %d reports after a batch, want 3 (batches of 2)", got, batches)
	}
	got = nil
	p.DryRun = true
	if _, err := in.Replay(ctx, p); err != nil || len(got) != 0 {
		t.Errorf("dry run reported progress %v (%v)", got, err)
	}
}

func testPurge(t *testing.T, h Harness) {
	ctx := testContext(t)
	p, ok := h.Dialect().(dialect.Purger)
	if !ok {
		t.Skip("the dialect does not implement dialect.Purger")
	}
	ager, ok := h.(Ager)
	if !ok {
		t.Skip("the harness cannot age rows")
	}
	// 0-2 sent, 3 dead: aged. 4 sent: fresh. 5 pending, 6 processing: aged.
	ids := insert(t, ctx, h, Row{}, Row{}, Row{}, Row{}, Row{})
	kill(t, ctx, h.Dialect(), "poison", ids[3])
	claimComplete(t, ctx, h.Dialect())
	more := insert(t, ctx, h, Row{}, Row{})
	if got := claim(t, ctx, h, newToken(), 1, longLease); len(got) != 1 || got[0].ID != more[0] {
		t.Fatalf("claim = %v", got)
	}
	ids = append(ids, more[1], more[0])
	for _, i := range []int{0, 1, 2, 3, 5, 6} {
		if err := ager.Age(ctx, ids[i], 48*time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Purge(ctx, dialect.PurgeParams{State: "pending", OlderThan: time.Hour, Limit: 10}); err == nil {
		t.Error("purge of pending rows accepted")
	}
	if _, err := p.Purge(ctx, dialect.PurgeParams{State: "processing", OlderThan: time.Hour, Limit: 10}); err == nil {
		t.Error("purge of processing rows accepted")
	}
	n, err := p.Purge(ctx, dialect.PurgeParams{State: "sent", OlderThan: 24 * time.Hour, Limit: 2})
	wantAffected(t, "purge sent batch 1", n, err, 2)
	n, err = p.Purge(ctx, dialect.PurgeParams{State: "sent", OlderThan: 24 * time.Hour, Limit: 2})
	wantAffected(t, "purge sent batch 2", n, err, 1)
	n, err = p.Purge(ctx, dialect.PurgeParams{State: "sent", OlderThan: 24 * time.Hour, Limit: 2})
	wantAffected(t, "purge sent batch 3", n, err, 0)
	n, err = p.Purge(ctx, dialect.PurgeParams{State: "dead", OlderThan: 72 * time.Hour, Limit: 10})
	wantAffected(t, "purge dead older than 72h", n, err, 0)
	n, err = p.Purge(ctx, dialect.PurgeParams{State: "dead", OlderThan: 24 * time.Hour, Limit: 10})
	wantAffected(t, "purge dead", n, err, 1)
	for i, id := range ids {
		_, err := h.Row(ctx, id)
		gone := err != nil
		if wantGone := i <= 3; gone != wantGone {
			t.Errorf("row %d: gone = %v (%v), want %v", i, gone, err, wantGone)
		}
	}
	if r := row(t, ctx, h, ids[6]); r.State != outbox.StateProcessing {
		t.Errorf("processing row: %+v", r)
	}
}
