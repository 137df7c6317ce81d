// Package natssource feeds the inbox from a JetStream durable pull
// consumer: each message is stored, then acknowledged; one that can never
// be stored is terminated.
package natssource

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/queuebox/queuebox/inbox/intake"
	"github.com/queuebox/queuebox/inbox/source"
)

// Options say what to consume.
type Options struct {
	Servers  []string
	Stream   string
	Consumer string   // the durable consumer, created or updated at start
	Subjects []string // filter subjects; none: the whole stream
	Batch    int      // messages per fetch; default 64
	AckWait  time.Duration
	Headers  intake.HeaderPolicy
}

// Source is a running JetStream source.
type Source struct {
	nc   *nats.Conn
	cons jetstream.Consumer
	sink *source.Sink
	o    Options
}

// New connects and creates (or updates) the durable consumer.
func New(ctx context.Context, sink *source.Sink, o Options) (*Source, error) {
	if o.Batch <= 0 {
		o.Batch = 64
	}
	if o.AckWait <= 0 {
		o.AckWait = 30 * time.Second
	}
	nc, err := nats.Connect(joinServers(o.Servers), nats.Name("queuebox inbox"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	cc := jetstream.ConsumerConfig{Durable: o.Consumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: o.AckWait, MaxAckPending: 4 * o.Batch}
	if len(o.Subjects) == 1 {
		cc.FilterSubject = o.Subjects[0]
	} else {
		cc.FilterSubjects = o.Subjects
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, o.Stream, cc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: consumer %s on stream %s: %w", o.Consumer, o.Stream, err)
	}
	return &Source{nc: nc, cons: cons, sink: sink, o: o}, nil
}

func joinServers(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += ","
		}
		out += v
	}
	return out
}

// Run fetches and stores messages until ctx ends, then closes the
// connection. Messages fetched but not stored are redelivered after
// AckWait.
func (s *Source) Run(ctx context.Context) error {
	defer s.nc.Close()
	for ctx.Err() == nil {
		batch, err := s.cons.Fetch(s.o.Batch, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for m := range batch.Messages() {
			s.put(ctx, m)
		}
	}
	return nil
}

func (s *Source) put(ctx context.Context, m jetstream.Msg) {
	h := m.Headers()
	get := func(name string) string { return h.Get(name) }
	in := intake.Input{Topic: m.Subject(), Header: get, Body: &intake.Body{Raw: m.Data()}, MessageID: source.MessageID(get)}
	if md, err := m.Metadata(); err == nil {
		in.Fallback = fmt.Sprintf("%s:%d", md.Stream, md.Sequence.Stream)
	}
	err := s.sink.Put(ctx, in, s.o.Headers.Filter(http.Header(h)))
	switch {
	case err == nil:
		_ = m.Ack()
	case errors.Is(err, source.ErrRefused):
		_ = m.Term()
	}
}
