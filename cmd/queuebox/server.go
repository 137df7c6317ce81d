package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/queuebox/queuebox/config"
	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/redact"
	"github.com/queuebox/queuebox/relay"
)

// healthTimeout bounds each readiness check.
const healthTimeout = 2 * time.Second

// backlogInterval is how often the backlog gauges are refreshed: on an
// interval, never per scrape, so that scrapes cost the database nothing.
const backlogInterval = 10 * time.Second

func (rt *relayRuntime) managementHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(rt.metrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /health/live", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "up"})
	})
	mux.HandleFunc("GET /health/ready", func(w http.ResponseWriter, r *http.Request) {
		ok, components := rt.ready(r.Context())
		status, state := http.StatusOK, "up"
		switch {
		case !ok:
			status, state = http.StatusServiceUnavailable, "down"
		case !allUp(components):
			state = "degraded" // ready, but a destination is down: its rows wait
		}
		writeJSON(w, status, readyBody{Status: state, Readiness: rt.cfg.Server.Readiness, Components: components})
	})
	if rt.cfg.Server.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// readyBody is the JSON of /health/ready (docs/deploying.md, Probes).
type readyBody struct {
	Status     string                     `json:"status"`    // up, degraded (ready, a destination down) or down
	Readiness  string                     `json:"readiness"` // server.readiness: database or strict
	Components map[string]componentHealth `json:"components"`
}

type componentHealth struct {
	Status  string `json:"status"`
	Error   string `json:"error,omitempty"`
	Circuit string `json:"circuit,omitempty"` // destinations: closed, open or half-open
}

func allUp(components map[string]componentHealth) bool {
	for _, c := range components {
		if c.Status != "up" {
			return false
		}
	}
	return true
}

// ready reports whether the relay can do its job, and the state of each
// component: the database (pinged) and each destination as the relay sees
// it, through its circuit breaker. By default only the database decides:
// a destination's outage must not make every replica unready, which would
// stall a rolling update (of the fix, say) for as long as it lasts, while
// the relay deals with the outage itself (the rows wait without spending
// attempts). With server.readiness: strict every destination that can be
// checked is also checked (a connection, an HTTP TCP dial), and any
// component down fails readiness. Checks run in parallel, each within
// healthTimeout.
func (rt *relayRuntime) ready(ctx context.Context) (bool, map[string]componentHealth) {
	strict := rt.cfg.Server.Readiness == config.ReadinessStrict
	var mu sync.Mutex
	out := map[string]componentHealth{}
	check := func(name string, fn func(context.Context) error) {
		cctx, cancel := context.WithTimeout(ctx, healthTimeout)
		defer cancel()
		h := componentHealth{Status: "up"}
		if err := fn(cctx); err != nil {
			h = componentHealth{Status: "down", Error: redact.Error(err, 300, rt.cfg.Secrets()...)}
		}
		mu.Lock()
		out[name] = h
		mu.Unlock()
	}
	var wg sync.WaitGroup
	wg.Go(func() { check("database", func(ctx context.Context) error { return rt.db.Ping(ctx) }) })
	if strict {
		for name, d := range rt.dests {
			if c, ok := d.(destination.Checker); ok {
				wg.Go(func() { check("destination."+name, c.Check) })
			}
		}
	}
	wg.Wait()
	if rt.engine != nil {
		for name, st := range rt.engine.Circuits() {
			h := out["destination."+name]
			if h.Status == "" {
				h.Status = "up" // not checked: the circuit says what is known
				if st != relay.BreakerClosed {
					h.Status = "down"
				}
			}
			h.Circuit = st.String()
			out["destination."+name] = h
		}
	}
	if strict {
		return allUp(out), out
	}
	return out["database"].Status == "up", out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// refreshBacklog updates the backlog gauges every backlogInterval until ctx
// ends.
func (rt *relayRuntime) refreshBacklog(ctx context.Context) {
	in, ok := rt.db.Dialect.(dialect.Inspector)
	if !ok {
		return
	}
	t := time.NewTicker(backlogInterval)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, backlogInterval)
		// No sent count: no gauge shows it, and it grows with the table.
		st, err := in.Stats(cctx, dialect.StatsParams{WithoutSent: true})
		cancel()
		if err == nil {
			rt.metrics.Pending.Set(float64(st.ByState["pending"]))
			rt.metrics.Processing.Set(float64(st.ByState["processing"]))
			rt.metrics.Dead.Set(float64(st.ByState["dead"]))
			rt.metrics.OldestPendingAge.Set(st.OldestPendingAge.Seconds())
			if st.Processing != nil {
				rt.metrics.OldestProcessingAge.Set(st.Processing.OldestClaimAge.Seconds())
			}
		} else if ctx.Err() == nil {
			rt.log.Warn("refreshing backlog metrics failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
