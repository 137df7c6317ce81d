// Package source is what the inbox's broker sources share: a Sink that
// stores one message in the inbox table, retrying while the database is
// away, and says whether to acknowledge it or refuse it for good. A broker
// message is acknowledged only after its row has committed.
package source

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/inbox/intake"
)

// IDHeaders are the headers that carry a message's id, in the order they
// are read: JetStream's, queuebox's Kafka and HTTP one (AMQP's is the
// message_id property, read by its source).
var IDHeaders = []string{"Nats-Msg-Id", "X-Message-Id"}

// Observer receives one event per message, for metrics (as the HTTP
// ingest's): outcome accepted, duplicate or refused.
type Observer interface {
	Received(source, outcome string, d time.Duration)
}

// Sink stores the messages of one source.
type Sink struct {
	Store       inbox.Receiver
	Rules       intake.Rules
	Pull        bool
	MaxAttempts int
	Observer    Observer
	Logger      *slog.Logger
}

// ErrRefused is returned by Put for a message that can never be stored (a
// body that is not JSON, no id, a value too long): terminate or reject it.
var ErrRefused = errors.New("refused")

// Put stores one message and returns nil once its row has committed (new
// or a duplicate): acknowledge it then. While the database cannot be
// reached it tries again, backing off up to 10s, until ctx ends (then
// ctx's error: do not acknowledge).
func (s *Sink) Put(ctx context.Context, in intake.Input, headers map[string]string) error {
	start := time.Now()
	if !json.Valid(in.Body.Raw) {
		return s.refuse(in, errors.New("the body is not JSON"), start)
	}
	out, err := s.Rules.Apply(in)
	if err != nil {
		return s.refuse(in, err, start)
	}
	row := inbox.Row{Source: s.Rules.Source, IdempotencyKey: out.IdempotencyKey, Topic: out.Topic, Key: out.Key,
		Payload: in.Body.Raw, Headers: headers, Pull: s.Pull, MaxAttempts: s.MaxAttempts}
	wait := 100 * time.Millisecond
	for {
		rc, err := s.Store.Receive(ctx, row)
		switch {
		case err == nil:
			outcome := "accepted"
			if rc.Duplicate {
				outcome = "duplicate"
			}
			s.observe(outcome, start)
			return nil
		case errors.Is(err, inbox.ErrRejected):
			return s.refuse(in, err, start)
		case ctx.Err() != nil:
			return ctx.Err()
		}
		s.Log().Warn("inbox: could not store a message; trying again", "source", s.Rules.Source, "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
}

func (s *Sink) refuse(in intake.Input, err error, start time.Time) error {
	s.observe("refused", start)
	s.Log().Warn("inbox: message refused", "source", s.Rules.Source, "arrived_on", in.Topic, "reason", err)
	return errors.Join(ErrRefused, err)
}

func (s *Sink) observe(outcome string, start time.Time) {
	if s.Observer != nil {
		s.Observer.Received(s.Rules.Source, outcome, time.Since(start))
	}
}

// Log is the sink's logger (a discarding one when none is set).
func (s *Sink) Log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

// MessageID returns the first id header of get that is set.
func MessageID(get func(string) string) string {
	for _, h := range IDHeaders {
		if v := strings.TrimSpace(get(h)); v != "" {
			return v
		}
	}
	return ""
}
