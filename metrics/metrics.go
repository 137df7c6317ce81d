// Package metrics exposes the relay's Prometheus series. It implements
// relay.Observer, so the engine reports events and no adapter knows about
// metrics. Label sets are bounded: destination names come from the config,
// outcomes and operations are fixed sets; no ids, keys or topics.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/queuebox/queuebox/relay"
)

// Namespace prefixes every series.
const Namespace = "queuebox"

// Metrics is the set of queuebox series, registered on its own registry.
type Metrics struct {
	Registry *prometheus.Registry

	claimDuration   *prometheus.HistogramVec
	claimTurnWait   prometheus.Histogram
	claimedRows     prometheus.Counter
	claimLimit      prometheus.Gauge
	pastFront       prometheus.Counter
	destLimit       *prometheus.GaugeVec
	backpressure    *prometheus.CounterVec
	publishDuration *prometheus.HistogramVec
	commitToAck     *prometheus.HistogramVec
	deliveries      *prometheus.CounterVec
	writeDuration   *prometheus.HistogramVec
	claimsLost      prometheus.Counter
	reclaimed       prometheus.Counter
	inflight        prometheus.Gauge
	circuit         *prometheus.GaugeVec
	purged          *prometheus.CounterVec
	wakeListening   prometheus.Gauge
	wakeArmed       prometheus.Gauge
	wakeNotified    prometheus.Counter
	buildInfo       *prometheus.GaugeVec
	headersDropped  *prometheus.CounterVec

	// Backlog gauges, refreshed on an interval by whoever owns the
	// database (never per scrape).
	Pending          prometheus.Gauge
	OldestPendingAge prometheus.Gauge
	Dead             prometheus.Gauge
	Processing       prometheus.Gauge
	// OldestProcessingAge: since the oldest processing row was claimed
	// (PostgreSQL; stays 0 where the dialect does not read it).
	OldestProcessingAge prometheus.Gauge
}

var (
	_ relay.Observer          = (*Metrics)(nil)
	_ relay.RetentionObserver = (*Metrics)(nil)
)

// New returns the series registered on a fresh registry, with the Go and
// process collectors.
func New() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{Registry: r}
	m.claimSeries()
	m.destinationSeries()
	m.settleSeries()
	m.backlogSeries()
	m.wakeSeries()
	m.headersDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "row_headers_dropped_total",
		Help: "Row headers a destination did not send because its policy drops them (broker control headers, the headers queuebox sets itself), per message published.",
	}, []string{"destination"})
	m.buildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "build_info",
		Help: "Always 1; its labels say which build is running (queuebox version).",
	}, []string{"version", "revision", "goversion"})
	r.MustRegister(m.buildInfo, m.headersDropped)
	m.zeroFixedSeries()
	return m
}

// latencyBuckets are the buckets of every duration histogram, in seconds.
func latencyBuckets() []float64 {
	return []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
}

// claimSeries: the claim statements and what they took.
func (m *Metrics) claimSeries() {
	m.claimDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "claim_duration_seconds",
		Help:    "Duration of claim statements, by result (ok, error).",
		Buckets: latencyBuckets(),
	}, []string{"result"})
	m.claimTurnWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "claim_turn_wait_seconds",
		Help:    "Time a claim waited for the table's claim turn (relay.claimTurns: table, PostgreSQL lease mode), from sending the claim to the grant.",
		Buckets: latencyBuckets(),
	})
	m.claimedRows = counter("claimed_rows_total",
		"Rows claimed.")
	m.claimLimit = gauge("claim_limit",
		"Rows the last claim asked for: relay.batchSize, or the free in-flight budget when less.")
	m.pastFront = counter("claims_past_front_total",
		"Claims whose window started past the front of the table, because rows that cannot be claimed now filled the windows before it.")
	m.Registry.MustRegister(m.claimDuration, m.claimTurnWait, m.claimedRows, m.claimLimit, m.pastFront)
}

// destinationSeries: publishing, by destination, and each destination's
// limits and circuit.
func (m *Metrics) destinationSeries() {
	m.destLimit = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "destination_inflight_limit",
		Help: "A destination's limit on rows in flight, as it adapts to the destination's answers (at most its concurrency).",
	}, []string{"destination"})
	m.backpressure = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "destination_backpressure_total",
		Help: "Rows a destination had no room for (stream or account limits, broker alarms, quotas, HTTP 429/507), by the limit it named; they wait without spending attempts.",
	}, []string{"destination", "limit"})
	m.publishDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "publish_duration_seconds",
		Help:    "Duration of one batch publish to a destination.",
		Buckets: latencyBuckets(),
	}, []string{"destination"})
	m.commitToAck = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "commit_to_ack_seconds",
		Help:    "Time from a row's created_at to the destination's acknowledgement.",
		Buckets: latencyBuckets(),
	}, []string{"destination"})
	m.circuit = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "destination_circuit_state",
		Help: "Circuit breaker of a destination: 0 closed, 1 open, 2 half-open.",
	}, []string{"destination"})
	m.Registry.MustRegister(m.destLimit, m.backpressure, m.publishDuration, m.commitToAck, m.circuit)
}

// settleSeries: what became of the claimed rows, the writes that settled
// them, leases lost and reclaimed, and retention.
func (m *Metrics) settleSeries() {
	m.deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "deliveries_total",
		Help: "Rows settled, by destination and outcome (sent, retry, dead, released).",
	}, []string{"destination", "outcome"})
	m.writeDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "settle_duration_seconds",
		Help:    "Duration of settlement statements, by operation (complete, retry, dead, release) and result.",
		Buckets: latencyBuckets(),
	}, []string{"op", "result"})
	m.claimsLost = counter("claims_lost_total",
		"Rows whose fenced write matched nothing: the lease expired and the row was reclaimed.")
	m.reclaimed = counter("leases_reclaimed_total",
		"Rows returned to pending because their lease expired.")
	m.inflight = gauge("inflight_rows",
		"Rows claimed by this process and not yet settled.")
	m.purged = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "retention_deleted_rows_total",
		Help: "Rows deleted by retention, by state (sent, dead).",
	}, []string{"state"})
	m.Registry.MustRegister(m.deliveries, m.writeDuration, m.claimsLost, m.reclaimed, m.inflight, m.purged)
}

// backlogSeries: the table's backlog gauges, which their owner refreshes.
func (m *Metrics) backlogSeries() {
	m.Pending = gauge("pending_rows",
		"Rows in state pending (refreshed on an interval).")
	m.Processing = gauge("processing_rows",
		"Rows in state processing, across all relays (refreshed on an interval).")
	m.Dead = gauge("dead_rows",
		"Rows in state dead (refreshed on an interval).")
	m.OldestPendingAge = gauge("oldest_pending_age_seconds",
		"Age of the oldest due pending row, 0 when none (refreshed on an interval).")
	m.OldestProcessingAge = gauge("oldest_processing_age_seconds",
		"Time since the oldest processing row was claimed, 0 when none (refreshed on an interval).")
	m.Registry.MustRegister(m.Pending, m.Processing, m.Dead, m.OldestPendingAge, m.OldestProcessingAge)
}

// wakeSeries: wake on commit (relay.notify).
func (m *Metrics) wakeSeries() {
	m.wakeListening = gauge("wake_listening",
		"1 while the wake-on-commit LISTEN connection is up (relay.notify), else 0.")
	m.wakeArmed = gauge("wake_armed",
		"1 while this relay holds the notify lock: it sleeps and producers notify.")
	m.wakeNotified = counter("wake_notifications_total",
		"Notifications received on the relay.notify channel.")
	m.Registry.MustRegister(m.wakeListening, m.wakeArmed, m.wakeNotified)
}

// zeroFixedSeries makes every series with a fixed label set exist from the
// start, at zero, so that dashboards and alerts (rate(), absent()) see it
// before the first event.
func (m *Metrics) zeroFixedSeries() {
	for _, res := range []string{"ok", "error"} {
		m.claimDuration.WithLabelValues(res)
		for _, op := range []string{"complete", "retry", "dead", "release"} {
			m.writeDuration.WithLabelValues(op, res)
		}
	}
	for _, s := range []string{"sent", "dead"} {
		m.purged.WithLabelValues(s)
	}
}

// gauge and counter declare an unlabelled series of the namespace.
func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help})
}

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help})
}

// SetBuildInfo sets queuebox_build_info{version,revision,goversion} to 1,
// replacing any earlier labels.
func (m *Metrics) SetBuildInfo(version, revision, goVersion string) {
	m.buildInfo.Reset()
	m.buildInfo.WithLabelValues(version, revision, goVersion).Set(1)
}

// WakeListening, WakeArmed and WakeNotified report the wake-on-commit
// listener's state (postgres.WakeObserver).
func (m *Metrics) WakeListening(up bool) { m.wakeListening.Set(b2f(up)) }
func (m *Metrics) WakeArmed(armed bool)  { m.wakeArmed.Set(b2f(armed)) }
func (m *Metrics) WakeNotified()         { m.wakeNotified.Inc() }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// InitDestination creates the series of a destination at zero, so that
// dashboards and alerts see them before the first delivery.
func (m *Metrics) InitDestination(name string) {
	m.circuit.WithLabelValues(name).Set(float64(relay.BreakerClosed))
	for _, o := range []relay.Outcome{relay.OutcomeSent, relay.OutcomeRetry, relay.OutcomeDead, relay.OutcomeDeferred} {
		m.deliveries.WithLabelValues(name, string(o))
	}
	m.publishDuration.WithLabelValues(name)
	m.commitToAck.WithLabelValues(name)
	m.destLimit.WithLabelValues(name)
	m.headersDropped.WithLabelValues(name)
}

// RowHeaderDropped counts a row header that destination dest did not send
// (its OnDroppedHeader).
func (m *Metrics) RowHeaderDropped(dest string) { m.headersDropped.WithLabelValues(dest).Inc() }

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// Claimed implements relay.Observer.
func (m *Metrics) Claimed(rows, limit int, d time.Duration, err error) {
	m.claimDuration.WithLabelValues(result(err)).Observe(d.Seconds())
	m.claimLimit.Set(float64(limit))
	m.claimedRows.Add(float64(rows))
	m.inflight.Add(float64(rows))
}

// ClaimTurnWaited records how long a claim waited for the table's claim
// turn (postgres.Dialect.ObserveTurnWait).
func (m *Metrics) ClaimTurnWaited(d time.Duration) { m.claimTurnWait.Observe(d.Seconds()) }

// Published implements relay.Observer.
func (m *Metrics) Published(dest string, rows int, d time.Duration, err error) {
	m.publishDuration.WithLabelValues(dest).Observe(d.Seconds())
}

// Acked implements relay.Observer.
func (m *Metrics) Acked(dest string, sinceCreated time.Duration) {
	m.commitToAck.WithLabelValues(dest).Observe(max(sinceCreated, 0).Seconds())
}

// Settled implements relay.Observer.
func (m *Metrics) Settled(dest string, o relay.Outcome, rows int) {
	m.deliveries.WithLabelValues(dest, string(o)).Add(float64(rows))
	m.inflight.Sub(float64(rows))
}

// Wrote implements relay.Observer.
func (m *Metrics) Wrote(op string, d time.Duration, err error) {
	m.writeDuration.WithLabelValues(op, result(err)).Observe(d.Seconds())
}

// Lost implements relay.Observer.
func (m *Metrics) Lost(rows int) { m.claimsLost.Add(float64(rows)) }

// Reclaimed implements relay.Observer.
func (m *Metrics) Reclaimed(rows int) { m.reclaimed.Add(float64(rows)) }

// BreakerChanged implements relay.Observer.
func (m *Metrics) BreakerChanged(dest string, to relay.BreakerState) {
	m.circuit.WithLabelValues(dest).Set(float64(to))
}

// ClaimedPastFront implements relay.Observer.
func (m *Metrics) ClaimedPastFront(int) { m.pastFront.Inc() }

// DestinationLimit implements relay.Observer.
func (m *Metrics) DestinationLimit(dest string, limit int) {
	m.destLimit.WithLabelValues(dest).Set(float64(limit))
}

// Backpressure implements relay.Observer.
func (m *Metrics) Backpressure(dest, limit string) {
	m.backpressure.WithLabelValues(dest, limit).Inc()
}

// Purged implements relay.RetentionObserver.
func (m *Metrics) Purged(state string, rows int) { m.purged.WithLabelValues(state).Add(float64(rows)) }
