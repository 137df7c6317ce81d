package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
)

// latencyProducers write the offered load side by side, one row per
// transaction.
const latencyProducers = 8

// latencyInsert is the producers' statement: one row per transaction.
const latencyInsert = "INSERT INTO outbox (id, topic, key, payload) VALUES ($1, $2, $3, $4)"

// runLatency offers o.Rate rows/s for o.Duration to one relay (NATS, keyed)
// and measures commit-to-ack at the receiver: the time a core NATS
// subscription on the stream's subject sees the message, minus the time the
// producer's COMMIT returned. With wake, the relay runs with relay.notify
// (LISTEN/NOTIFY and the opt-in trigger); without, it polls.
func runLatency(ctx context.Context, w *world, o *Options, tmp string, wake bool) (l Latency) {
	l.Wake, l.Offered = wake, o.Rate
	fail := func(err error) Latency { l.Error = err.Error(); return l }
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	s, err := w.newSchema(ctx)
	if err != nil {
		return fail(err)
	}
	defer s.close()
	topic := topicFor()
	st, err := w.stream(ctx, topic)
	if err != nil {
		return fail(err)
	}
	defer func() { _ = w.js.DeleteStream(context.WithoutCancel(ctx), st.CachedInfo().Config.Name) }()

	total := int(float64(o.Rate) * o.Duration.Seconds())
	recv, unsubscribe, err := subscribeReceipts(w.nc, topic, total)
	if err != nil {
		return fail(err)
	}
	defer unsubscribe()

	cfg := o.replicaConfig(s.url)
	cfg.TraceEndpoint = w.traceURL()
	cfg.Dest, cfg.NATSURL, cfg.Subject, cfg.Stream = "nats", w.natsURL, topic, st.CachedInfo().Config.Name
	if wake {
		cfg.Notify = "qbb_" + randomHex(4)
	}
	reps, err := startReplicas(ctx, o.Binary, tmp, cfg, 1)
	if err != nil {
		return fail(err)
	}
	defer stopReplicas(reps)
	// Idle cost of this configuration (empty table).
	l.IdleQPS, l.IdleCPU, err = idleCost(ctx, w, o, reps)
	if err != nil {
		return fail(err)
	}

	// With wake on commit, count the commits that notify.
	var notified atomic.Int64
	if wake {
		stop, err := countNotifications(ctx, s.url, cfg.Notify, &notified)
		if err != nil {
			return fail(err)
		}
		defer func() { stop(); l.Notifications = int(notified.Load()) }()
	}

	// The producers' connections are opened, and their INSERT prepared,
	// before the clock starts: an application's pool is warm, and
	// connections forked and planned in the first milliseconds of the run
	// stall the cores, and the relay with them, which the p99 counts.
	if err := warmProducers(ctx, s.pool, latencyProducers, latencyInsert); err != nil {
		return fail(err)
	}
	committed, achieved, err := offerLoad(ctx, s.pool, o, topic, total)
	l.Achieved = achieved
	if err != nil {
		return fail(err)
	}
	lat := recv.latencies(ctx, committed)
	l.Rows, l.Delivered = len(committed), len(lat)
	if len(lat) < len(committed) {
		return fail(fmt.Errorf("%d of %d rows arrived", len(lat), len(committed)))
	}
	slices.Sort(lat)
	l.P50, l.P95, l.P99, l.Max = pct(lat, 50), pct(lat, 95), pct(lat, 99), lat[len(lat)-1]
	return l
}

// subscribeReceipts records when a core NATS subscription on subject sees
// each message, by its Nats-Msg-Id, expecting total of them.
func subscribeReceipts(nc *nats.Conn, subject string, total int) (*receipts, func(), error) {
	recv := newReceipts(total)
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		recv.add(m.Header.Get("Nats-Msg-Id"), time.Now())
	})
	if err != nil {
		return nil, nil, err
	}
	unsubscribe := func() { _ = sub.Unsubscribe() }
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		unsubscribe()
		return nil, nil, err
	}
	return recv, unsubscribe, nil
}

// offerLoad writes total rows with latencyProducers side by side, row i due
// at start + i/rate, and returns when each row's COMMIT returned, by id,
// and the rows/s the writers achieved.
//
// Writers that fall behind (PostgreSQL serialises the commits that send
// NOTIFY; the trigger sends it only while the relay sleeps) stop at the
// end of the duration: the rows not yet written are not offered, and
// "written rows/s" says what the writers managed.
func offerLoad(ctx context.Context, pool *pgxpool.Pool, o *Options, topic string, total int) (map[string]time.Time, float64, error) {
	var (
		mu        sync.Mutex
		committed = make(map[string]time.Time, total)
		errOnce   sync.Once
		prodErr   error
	)
	body := payload(o.PayloadSize)
	keys := max(o.Keys, 1)
	next := make(chan int)
	start := time.Now()
	var wg sync.WaitGroup
	for range latencyProducers {
		wg.Go(func() {
			for i := range next {
				due := start.Add(time.Duration(float64(i) / float64(o.Rate) * float64(time.Second)))
				if d := time.Until(due); d > 0 {
					time.Sleep(d)
				}
				id := uuid.NewString()
				_, err := pool.Exec(ctx, latencyInsert, id, topic, fmt.Sprintf("k%d", i%keys), body)
				at := time.Now()
				if err != nil {
					errOnce.Do(func() { prodErr = err })
					continue
				}
				mu.Lock()
				committed[id] = at
				mu.Unlock()
			}
		})
	}
	end := start.Add(o.Duration + time.Second)
	for i := 0; i < total && ctx.Err() == nil && time.Now().Before(end); i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	achieved := float64(len(committed)) / time.Since(start).Seconds()
	if prodErr != nil {
		return committed, achieved, fmt.Errorf("producer: %w", prodErr)
	}
	return committed, achieved, nil
}

// latencies waits for the committed rows to arrive (up to 30s) and returns
// the commit-to-receipt time of each that did, in milliseconds.
func (r *receipts) latencies(ctx context.Context, committed map[string]time.Time) []float64 {
	r.expect(len(committed))
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	lat := make([]float64, 0, len(committed))
	for id, c := range committed {
		if at, ok := r.seen[id]; ok {
			lat = append(lat, max(float64(at.Sub(c).Microseconds())/1000, 0))
		}
	}
	return lat
}

// warmProducers opens n connections of pool (each held until all are open,
// so that they are n distinct ones) and prepares query on each under its
// own text as the name, which pgx's Exec then finds and runs without
// preparing it again.
func warmProducers(ctx context.Context, pool *pgxpool.Pool, n int, query string) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("bench: producer connection: %w", err)
		}
		conns = append(conns, c)
		if _, err := c.Conn().Prepare(ctx, query, query); err != nil {
			return fmt.Errorf("bench: prepare the producers' insert: %w", err)
		}
	}
	return nil
}

// countNotifications LISTENs on channel on a connection of its own and
// counts what arrives in n until stop.
func countNotifications(ctx context.Context, url, channel string, n *atomic.Int64) (stop func(), err error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("bench: listen: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("bench: listen: %w", err)
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := conn.WaitForNotification(lctx); err != nil {
				return
			}
			n.Add(1)
		}
	}()
	return func() {
		cancel()
		<-done
		_ = conn.Close(context.WithoutCancel(ctx))
	}, nil
}

func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p / 100)
	return sorted[i]
}
