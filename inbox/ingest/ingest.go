// Package ingest is the inbox's HTTP side: POST /inbox/{source} on its own
// port, authenticated per source, bounded in size and rate, and stored with
// one INSERT ... ON CONFLICT DO NOTHING before the answer:
//
//	202 {"status":"accepted","id":…}   a new message, now durable
//	200 {"status":"duplicate","id":…}  the source had this idempotency key
//	400, 401, 404, 405, 413, 422, 429 (Retry-After), 503 {"status":"rejected","reason":…}
package ingest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/time/rate"

	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/inbox/intake"
)

// DefaultMaxBodyBytes is the largest body a source takes when none is set.
const DefaultMaxBodyBytes = 1 << 20

// Source is one HTTP source.
type Source struct {
	Name        string
	Auth        Auth
	Rules       intake.Rules
	Pull        bool    // handoff: pull (else push)
	MaxAttempts int     // of its rows; 0: inbox.DefaultMaxAttempts
	RatePerSec  float64 // 0: no limit
	Burst       int     // default: max(1, RatePerSec)
	limiter     *rate.Limiter
}

// Observer receives one event per request, for metrics. outcome is one of
// accepted, duplicate, bad_request, unauthorized, not_found, too_large,
// unprocessable, rate_limited, unavailable.
type Observer interface {
	Received(source, outcome string, d time.Duration)
}

// Options configure a Handler.
type Options struct {
	MaxBodyBytes int64
	Logger       *slog.Logger
	Observer     Observer
	Now          func() time.Time // for tests; default time.Now
}

// Handler serves POST /inbox/{source}.
type Handler struct {
	store   inbox.Receiver
	sources map[string]*Source
	o       Options
	mux     *http.ServeMux
}

// New returns the handler of sources, storing through store.
func New(store inbox.Receiver, sources []Source, o Options) (*Handler, error) {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	h := &Handler{store: store, sources: map[string]*Source{}, o: o, mux: http.NewServeMux()}
	for i := range sources {
		s := sources[i]
		if err := s.Auth.compile(); err != nil {
			return nil, fmt.Errorf("inbox.sources.%s: %w", s.Name, err)
		}
		if !s.Rules.IdempotencyKey.IsSet() {
			return nil, fmt.Errorf("inbox.sources.%s: an HTTP source needs idempotencyKey (a header or a jsonPath)", s.Name)
		}
		if s.RatePerSec > 0 {
			s.limiter = rate.NewLimiter(rate.Limit(s.RatePerSec), max(s.Burst, int(math.Ceil(s.RatePerSec)), 1))
		}
		h.sources[s.Name] = &s
	}
	h.mux.HandleFunc("POST /inbox/{source}", h.receive)
	h.mux.HandleFunc("/inbox/{source}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", http.MethodPost)
		answer(w, http.StatusMethodNotAllowed, "rejected", "", "use POST")
	})
	return h, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

type reply struct {
	Status string `json:"status"`
	ID     string `json:"id,omitempty"`
	Reason string `json:"reason,omitempty"`
}

func answer(w http.ResponseWriter, code int, status, id, reason string) {
	b, _ := json.Marshal(reply{Status: status, ID: id, Reason: reason})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// rejection is a request refused with a status, a metrics outcome and a
// reason for the sender.
type rejection struct {
	code    int
	outcome string
	reason  string
}

func (h *Handler) receive(w http.ResponseWriter, r *http.Request) {
	start := h.o.Now()
	name := r.PathValue("source")
	s, ok := h.sources[name]
	if !ok {
		answer(w, http.StatusNotFound, "rejected", "", fmt.Sprintf("no source %q", name))
		h.observe("", "not_found", start)
		return
	}
	rc, rej := h.accept(w, r, s, start)
	if rej != nil {
		if rej.code == http.StatusTooManyRequests || rej.code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", strconv.Itoa(h.retryAfter(s)))
		}
		answer(w, rej.code, "rejected", "", rej.reason)
		h.observe(s.Name, rej.outcome, start)
		if rej.code == http.StatusServiceUnavailable {
			h.o.Logger.Warn("inbox: could not store a message", "source", s.Name, "err", rej.reason)
		}
		return
	}
	if rc.Duplicate {
		answer(w, http.StatusOK, "duplicate", rc.ID, "")
		h.observe(s.Name, "duplicate", start)
		return
	}
	answer(w, http.StatusAccepted, "accepted", rc.ID, "")
	h.observe(s.Name, "accepted", start)
}

// accept runs the checks in order (rate, size, authentication, content)
// and stores the message.
func (h *Handler) accept(w http.ResponseWriter, r *http.Request, s *Source, now time.Time) (inbox.Receipt, *rejection) {
	if s.limiter != nil && !s.limiter.AllowN(now, 1) {
		return inbox.Receipt{}, &rejection{http.StatusTooManyRequests, "rate_limited", "rate limit exceeded; retry later"}
	}
	if r.ContentLength > h.o.MaxBodyBytes {
		return inbox.Receipt{}, tooLarge(h.o.MaxBodyBytes)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.o.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return inbox.Receipt{}, tooLarge(h.o.MaxBodyBytes)
		}
		return inbox.Receipt{}, &rejection{http.StatusBadRequest, "bad_request", "could not read the body"}
	}
	if err := s.Auth.Verify(r.Header, body, now); err != nil {
		return inbox.Receipt{}, &rejection{http.StatusUnauthorized, "unauthorized", err.Error()}
	}
	if !json.Valid(body) {
		return inbox.Receipt{}, &rejection{http.StatusBadRequest, "bad_request", "the body is not JSON"}
	}
	out, err := s.Rules.Apply(intake.Input{Topic: s.Name, Header: r.Header.Get, Body: &intake.Body{Raw: body}})
	if err != nil {
		var ie *intake.Error
		if errors.As(err, &ie) && ie.Unprocessable {
			return inbox.Receipt{}, &rejection{http.StatusUnprocessableEntity, "unprocessable", err.Error()}
		}
		return inbox.Receipt{}, &rejection{http.StatusBadRequest, "bad_request", err.Error()}
	}
	rc, err := h.store.Receive(r.Context(), inbox.Row{
		Source: s.Name, IdempotencyKey: out.IdempotencyKey, Topic: out.Topic, Key: out.Key,
		Payload: body, Headers: s.Rules.Headers.Filter(r.Header), Pull: s.Pull, MaxAttempts: s.MaxAttempts,
	})
	switch {
	case errors.Is(err, inbox.ErrRejected):
		return rc, &rejection{http.StatusUnprocessableEntity, "unprocessable", err.Error()}
	case err != nil && r.Context().Err() != nil:
		return rc, &rejection{http.StatusServiceUnavailable, "unavailable", "the request ended before the message was stored"}
	case err != nil:
		return rc, &rejection{http.StatusServiceUnavailable, "unavailable", "the inbox could not store the message; retry later"}
	}
	return rc, nil
}

func tooLarge(limit int64) *rejection {
	return &rejection{http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the body is larger than %d bytes", limit)}
}

// retryAfter is the wait, in whole seconds, a rate-limited or refused
// sender is told: one token's time at the source's rate, at least 1.
func (h *Handler) retryAfter(s *Source) int {
	if s.RatePerSec > 0 {
		return max(1, int(math.Ceil(1/s.RatePerSec)))
	}
	return 1
}

func (h *Handler) observe(source, outcome string, start time.Time) {
	if h.o.Observer != nil {
		h.o.Observer.Received(source, outcome, h.o.Now().Sub(start))
	}
}
