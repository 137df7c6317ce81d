// Package kafkasource feeds the inbox from a Kafka consumer group
// (franz-go): each record is stored, then its offset committed; a record
// that can never be stored is skipped (logged and counted).
package kafkasource

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/queuebox/queuebox/inbox/intake"
	"github.com/queuebox/queuebox/inbox/source"
)

// Options say what to consume.
type Options struct {
	Brokers []string
	Topics  []string
	Group   string
	Headers intake.HeaderPolicy
	// RecordKeyOrders makes the record key the order key when the rules
	// name none.
	RecordKeyOrders bool
}

// Source is a running consumer-group member.
type Source struct {
	cl   *kgo.Client
	sink *source.Sink
	o    Options
}

// New joins the group; offsets are committed only after the rows commit.
func New(sink *source.Sink, o Options) (*Source, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(o.Brokers...),
		kgo.ConsumerGroup(o.Group),
		kgo.ConsumeTopics(o.Topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	return &Source{cl: cl, sink: sink, o: o}, nil
}

// Run polls, stores and commits until ctx ends, then leaves the group.
func (s *Source) Run(ctx context.Context) error {
	defer s.cl.Close()
	for ctx.Err() == nil {
		fetches := s.cl.PollRecords(ctx, 256)
		var done []*kgo.Record
		fetches.EachRecord(func(r *kgo.Record) {
			if ctx.Err() == nil && s.put(ctx, r) {
				done = append(done, r)
			}
		})
		if len(done) > 0 {
			// Committed only after each record's row committed; a crash
			// before this line redelivers them, and the inbox absorbs
			// them as duplicates.
			_ = s.cl.CommitRecords(context.WithoutCancel(ctx), done...)
		}
		s.cl.AllowRebalance()
	}
	return nil
}

// put stores r and reports whether it may be committed (stored, or
// refused for good).
func (s *Source) put(ctx context.Context, r *kgo.Record) bool {
	h := http.Header{}
	for _, rh := range r.Headers {
		h.Add(rh.Key, string(rh.Value))
	}
	get := func(name string) string {
		for i := len(r.Headers) - 1; i >= 0; i-- {
			if strings.EqualFold(r.Headers[i].Key, name) {
				return string(r.Headers[i].Value)
			}
		}
		return ""
	}
	in := intake.Input{Topic: r.Topic, Header: get, Body: &intake.Body{Raw: r.Value}, MessageID: source.MessageID(get),
		Fallback: fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)}
	sink := s.sink
	if s.o.RecordKeyOrders && !sink.Rules.OrderKey.IsSet() && len(r.Key) > 0 {
		withKey := *sink
		withKey.Rules.OrderKey, _ = intake.NewField(recordKeyHeader, "")
		headerOf := in.Header
		in.Header = func(name string) string {
			if name == recordKeyHeader {
				return string(r.Key)
			}
			return headerOf(name)
		}
		sink = &withKey
	}
	err := sink.Put(ctx, in, s.o.Headers.Filter(h))
	return err == nil || errors.Is(err, source.ErrRefused)
}

// recordKeyHeader is the name the record key is read under when it is the
// order key; it is not stored.
const recordKeyHeader = "X-Queuebox-Record-Key"
