package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Inbox is the receiving service's series (docs/inbox.md), registered on
// the registry of the relay's Metrics. Sources come from the config, and
// outcomes are a fixed set.
type Inbox struct {
	received *prometheus.CounterVec
	duration *prometheus.HistogramVec
	purged   *prometheus.CounterVec

	// Table gauges, refreshed on an interval.
	Pending          prometheus.Gauge
	Processing       prometheus.Gauge
	Dead             prometheus.Gauge
	OldestPendingAge prometheus.Gauge
}

// InboxOutcomes are the outcome label's values.
var InboxOutcomes = []string{"accepted", "duplicate", "bad_request", "unauthorized", "not_found", "too_large", "unprocessable", "rate_limited", "unavailable", "refused"}

// NewInbox registers the inbox series on m's registry, with every source's
// outcomes at zero.
func (m *Metrics) NewInbox(sources []string) *Inbox {
	in := &Inbox{
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "inbox_received_total",
			Help: "Messages received by the inbox, by source and outcome (accepted, duplicate, or why it was refused).",
		}, []string{"source", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "inbox_receive_duration_seconds",
			Help:    "Time from a message's arrival to its answer (HTTP) or acknowledgement (brokers), by source.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .02, .05, .1, .25, .5, 1, 5},
		}, []string{"source"}),
		purged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "inbox_retention_deleted_rows_total",
			Help: "Inbox rows deleted by inbox.retention, by state (sent, dead).",
		}, []string{"state"}),
		Pending:          gauge("inbox_pending_rows", "Inbox rows of pull sources waiting for a worker (refreshed on an interval)."),
		Processing:       gauge("inbox_processing_rows", "Inbox rows claimed by a worker (refreshed on an interval)."),
		Dead:             gauge("inbox_dead_rows", "Inbox rows a worker gave up on (refreshed on an interval)."),
		OldestPendingAge: gauge("inbox_oldest_pending_age_seconds", "Age of the oldest due pending inbox row, 0 when none (refreshed on an interval)."),
	}
	m.Registry.MustRegister(in.received, in.duration, in.purged, in.Pending, in.Processing, in.Dead, in.OldestPendingAge)
	for _, s := range sources {
		for _, o := range InboxOutcomes {
			in.received.WithLabelValues(s, o)
		}
	}
	return in
}

// Received counts one message and observes its time to the answer.
func (in *Inbox) Received(source, outcome string, d time.Duration) {
	in.received.WithLabelValues(source, outcome).Inc()
	if source != "" {
		in.duration.WithLabelValues(source).Observe(d.Seconds())
	}
}

// Purged implements relay.RetentionObserver for the inbox table.
func (in *Inbox) Purged(state string, rows int) { in.purged.WithLabelValues(state).Add(float64(rows)) }
