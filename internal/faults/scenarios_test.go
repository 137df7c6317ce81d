package faults

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/internal/testenv"
)

// mixedTopic sends every fourth row of a key to the HTTP receiver, the
// others to JetStream.
func mixedTopic(n int) string {
	if n%4 == 3 {
		return "hook.created"
	}
	return "order.created"
}

func sentCount(t *testing.T, pool *pgxpool.Pool) int { return countStates(t, pool)["sent"] }

// unsettledOf counts the rows of ids that are not sent yet.
func unsettledOf(t *testing.T, pool *pgxpool.Pool, ids []string) int {
	t.Helper()
	var n int
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE id = ANY($1::uuid[]) AND state <> 'sent'`, ids).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// processingBefore returns the rows still processing that were claimed
// before the database time at.
func processingBefore(t *testing.T, pool *pgxpool.Pool, at time.Time) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := pool.Query(ctx, `SELECT id::text FROM outbox WHERE state = 'processing' AND claimed_at < $1`, at)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// TestFaultKillReplicas runs three replicas over 20,000 rows (200 keys,
// JetStream and HTTP) and SIGKILLs one of them in the middle of a batch
// three times, restarting it each time.
func TestFaultKillReplicas(t *testing.T) {
	faultSuite(t)
	resetKeys()
	w := newWorld(t, worldOptions{})
	const total, waves, keys = 20000, 3, 200
	w.hooks.delay = 10 * time.Millisecond // batches with HTTP rows last long enough to be killed in
	cfg := w.config("batchSize: 100\npollInterval: 20ms\nlease: 2s\nreapInterval: 200ms\nbackoff: {base: 100ms, max: 2s}", "")
	var reps [3]*testenv.Process
	for i := range reps {
		reps[i] = startQueuebox(t, fmt.Sprintf("replica-%d", i), "run", "--config", cfg)
	}
	addrs := make([]string, len(reps))
	for i, p := range reps {
		addrs[i] = p.ManagementAddr()
	}
	var recoveries []time.Duration
	var killedAt time.Time
	strandedTotal := 0
	inserted := 0
	start := time.Now()
	for k := 0; k < waves; k++ {
		n := total / waves
		if k == waves-1 {
			// The rest of the 20,000, but never less than a wave: a missed
			// kill may have inserted extra rows already (below), and the
			// last wave still needs rows to kill a replica in.
			n = max(total-inserted, total/waves)
		}
		insert(t, w.pg.Pool, n, keys, mixedTopic)
		inserted += n
		// Kill once a third of the wave is through, while the victim holds
		// claimed rows.
		testenv.Eventually(t, 2*time.Minute, func() bool { return sentCount(t, w.pg.Pool) >= inserted-n+n/3 }, "no progress in wave %d", k)
		// The victim is the first replica, starting from k, that holds
		// claimed rows right now. A kill is in the middle of a batch when,
		// half a lease later, rows claimed before it are still processing
		// (a live replica settles a batch in milliseconds); otherwise the
		// kill is repeated.
		var victim, stranded int
		var held []string
		// A replica settles a batch within milliseconds of its last
		// answer, and a settlement already sent is committed even when the
		// replica dies right after: many kills land between batches.
		for try := 0; stranded == 0; try++ {
			if try == maxKillTries {
				t.Fatalf("wave %d: no kill landed in the middle of a batch in %d tries", k, maxKillTries)
			}
			if c := countStates(t, w.pg.Pool); c["pending"] < 1000 {
				// The last kill missed and the wave is nearly through:
				// give the next try rows to work on.
				insert(t, w.pg.Pool, total/waves, keys, mixedTopic)
				inserted += total / waves
			}
			victim = -1
			testenv.Eventually(t, 30*time.Second, func() bool {
				for j := range reps {
					v := (k + try + j) % len(reps)
					if testenv.Metric(testenv.Scrape(t, addrs[v]), "queuebox_inflight_rows") > 0 {
						victim = v
						return true
					}
				}
				return false
			}, "no replica held claimed rows in wave %d: %v", k, countStates(t, w.pg.Pool))
			reps[victim].Kill()
			var killedDB time.Time
			if err := w.pg.Pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&killedDB); err != nil {
				t.Fatal(err)
			}
			killedAt = time.Now()
			time.Sleep(time.Second) // half the lease: measure, not choreography
			held = processingBefore(t, w.pg.Pool, killedDB)
			stranded = len(held)
			t.Logf("kill %d (try %d): replica %d SIGKILLed; %d rows of its batch stranded until the lease expires; table %v",
				k+1, try+1, victim, stranded, countStates(t, w.pg.Pool))
			reps[victim] = startQueuebox(t, fmt.Sprintf("replica-%d-restart-%d-%d", victim, k+1, try), "run", "--config", cfg)
			addrs[victim] = reps[victim].ManagementAddr()
		}
		strandedTotal += stranded
		// Recovery: every row that was processing at the kill (the
		// victim's batch among them) is sent.
		testenv.Eventually(t, time.Minute, func() bool { return unsettledOf(t, w.pg.Pool, held) == 0 }, "rows held at kill %d never delivered", k+1)
		recoveries = append(recoveries, time.Since(killedAt))
	}
	waitSettled(t, w.pg.Pool, 3*time.Minute)
	drain := time.Since(start)
	var lost, reclaimed float64
	for i, p := range reps {
		m := testenv.Scrape(t, addrs[i])
		lost += testenv.Metric(m, "queuebox_claims_lost_total")
		reclaimed += testenv.Metric(m, "queuebox_leases_reclaimed_total")
		if code := p.Stop(syscall.SIGTERM, 30*time.Second); code != 0 {
			t.Errorf("replica %d exit status %d after SIGTERM", i, code)
		}
	}
	r := mustCheck(t, w.collect(time.Second))
	if r.Sent != inserted {
		t.Fatalf("sent %d of %d", r.Sent, inserted)
	}
	figure(t, "kill-replicas", r, fmt.Sprintf("kills=3 stranded_by_kills=%d recover=%v drain=%v claims_lost(survivors)=%v leases_reclaimed(survivors)=%v",
		strandedTotal, roundAll(recoveries), drain.Round(100*time.Millisecond), lost, reclaimed))
}

// maxKillTries bounds the kills of one wave of TestFaultKillReplicas.
const maxKillTries = 12

func roundAll(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.Round(10*time.Millisecond).String())
	}
	return "[" + strings.Join(s, " ") + "]"
}

// TestFaultKillReplicasBucketMode is kill-replicas in bucket mode
// (relay.claimMode: buckets): three replicas share the table's buckets,
// and one of them is SIGKILLed three times while it has rows out, and
// started again at once. A killed replica's rows out are still pending; its
// buckets wait until its membership ends (one lease), then the live
// replicas take them and deliver those rows again with the same ids.
func TestFaultKillReplicasBucketMode(t *testing.T) {
	faultSuite(t)
	resetKeys()
	w := newWorld(t, worldOptions{})
	const total, waves, keys = 20000, 3, 200
	const lease = 2 * time.Second
	w.hooks.delay = 5 * time.Millisecond
	cfg := w.config("claimMode: buckets\nbatchSize: 100\npollInterval: 20ms\nlease: 2s\nbackoff: {base: 100ms, max: 2s}", "")
	var reps [3]*testenv.Process
	addrs := make([]string, len(reps))
	for i := range reps {
		reps[i] = startQueuebox(t, fmt.Sprintf("replica-%d", i), "run", "--config", cfg)
		addrs[i] = reps[i].ManagementAddr()
	}
	// orphaned counts the buckets whose owner's membership has ended.
	orphaned := func() int {
		var n int
		if err := w.pg.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_qb_buckets AS b
			WHERE b.member IS NOT NULL AND NOT EXISTS (SELECT 1 FROM outbox_qb_members AS m
			WHERE m.member = b.member AND m.expires_at > clock_timestamp())`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var handovers []time.Duration
	inserted := 0
	start := time.Now()
	for k := 0; k < waves; k++ {
		n := total / waves
		if k == waves-1 {
			n = total - inserted
		}
		insert(t, w.pg.Pool, n, keys, mixedTopic)
		inserted += n
		testenv.Eventually(t, 2*time.Minute, func() bool { return sentCount(t, w.pg.Pool) >= inserted-n+n/3 }, "no progress in wave %d", k)
		victim := -1
		testenv.Eventually(t, 30*time.Second, func() bool {
			for j := range reps {
				if v := (k + j) % len(reps); testenv.Metric(testenv.Scrape(t, addrs[v]), "queuebox_inflight_rows") > 0 {
					victim = v
					return true
				}
			}
			return false
		}, "no replica had rows out in wave %d", k)
		reps[victim].Kill()
		killed := time.Now()
		reps[victim] = startQueuebox(t, fmt.Sprintf("replica-%d-restart-%d", victim, k+1), "run", "--config", cfg)
		addrs[victim] = reps[victim].ManagementAddr()
		// The killed member's buckets are orphaned until its membership
		// ends, and then taken by live members.
		testenv.Eventually(t, 3*time.Second, func() bool { return orphaned() > 0 }, "kill %d: the killed replica owned no bucket", k+1)
		testenv.Eventually(t, 4*lease, func() bool { return orphaned() == 0 }, "kill %d: the killed replica's buckets were not taken over", k+1)
		handovers = append(handovers, time.Since(killed))
		t.Logf("kill %d: replica %d SIGKILLed; its buckets had live owners again after %v; table %v",
			k+1, victim, handovers[len(handovers)-1].Round(10*time.Millisecond), countStates(t, w.pg.Pool))
	}
	waitSettled(t, w.pg.Pool, 3*time.Minute)
	drain := time.Since(start)
	var owners int
	if err := w.pg.Pool.QueryRow(context.Background(), `SELECT count(DISTINCT member) FROM outbox_qb_buckets`).Scan(&owners); err != nil {
		t.Fatal(err)
	}
	if owners != len(reps) {
		t.Errorf("the buckets have %d owners at the end, want the %d live replicas", owners, len(reps))
	}
	for i, p := range reps {
		if code := p.Stop(syscall.SIGTERM, 30*time.Second); code != 0 {
			t.Errorf("replica %d exit status %d after SIGTERM", i, code)
		}
	}
	r := mustCheck(t, w.collect(time.Second))
	if r.Sent != inserted {
		t.Fatalf("sent %d of %d", r.Sent, inserted)
	}
	figure(t, "kill-replicas-buckets", r, fmt.Sprintf("kills=3 handover=%v drain=%v", roundAll(handovers), drain.Round(100*time.Millisecond)))
}
