package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/outbox"
)

// Publish writes msgs and waits for acks from all in-sync replicas. It
// returns nil, a *destination.BatchError with one entry per message, or an
// outbox.Unavailable error when the cluster could not be reached at all.
func (d *Destination) Publish(ctx context.Context, msgs []outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		// Nothing was sent: every message fails, retryably.
		return err
	}
	errs := make([]error, len(msgs))
	recs := make([]kafkago.Message, len(msgs))
	byTopic := map[string][]int{}
	var topics []string
	for i := range msgs {
		rec, err := d.Record(&msgs[i])
		if err != nil {
			errs[i] = err
			continue
		}
		recs[i] = rec
		if _, ok := byTopic[rec.Topic]; !ok {
			topics = append(topics, rec.Topic)
		}
		byTopic[rec.Topic] = append(byTopic[rec.Topic], i)
	}
	// One WriteMessages per topic: kafka-go fails a whole call when the
	// metadata of any of its topics fails, and a missing topic must not
	// fail the records of other topics.
	var wg sync.WaitGroup
	for _, t := range topics {
		idx := byTopic[t]
		if len(topics) == 1 {
			d.write(ctx, recs, idx, errs)
			break
		}
		wg.Go(func() { d.write(ctx, recs, idx, errs) })
	}
	wg.Wait()

	var n, unavailable int
	for _, err := range errs {
		if err != nil {
			n++
			if outbox.IsUnavailable(err) {
				unavailable++
			}
		}
	}
	if n == 0 {
		return nil
	}
	if unavailable == len(msgs) {
		// The cluster could not be reached: one error for the batch, so the
		// engine can pause the destination instead of spending attempts.
		return errs[0]
	}
	return &destination.BatchError{Errs: errs}
}

// write writes recs[idx...] (one topic) and stores each outcome in errs.
func (d *Destination) write(ctx context.Context, recs []kafkago.Message, idx []int, errs []error) {
	pending := append([]int(nil), idx...)
	for len(pending) > 0 {
		batch := make([]kafkago.Message, len(pending))
		for j, i := range pending {
			batch[j] = recs[i]
		}
		err := d.writer.WriteMessages(ctx, batch...)
		var tooLarge kafkago.MessageTooLargeError
		if errors.As(err, &tooLarge) {
			// Refused before sending: larger than BatchBytes. Mark the one
			// record and write the others again.
			j := indexOfRecord(batch, tooLarge.Message)
			if j < 0 {
				j = 0
			}
			errs[pending[j]] = outbox.Permanent(fmt.Errorf("kafka: record of %d bytes is larger than the %d-byte limit: %w",
				len(batch[j].Value), d.writer.BatchBytes, kafkago.MessageSizeTooLarge))
			pending = append(pending[:j], pending[j+1:]...)
			continue
		}
		if err == nil {
			return
		}
		var werrs kafkago.WriteErrors
		if !errors.As(err, &werrs) || len(werrs) != len(batch) {
			cerr := Classify(err)
			for _, i := range pending {
				errs[i] = cerr
			}
			d.log.Debug("kafka write failed", "topic", batch[0].Topic, "records", len(batch), "error", err)
			return
		}
		// kafka-go reports one error per partition batch: a permanent
		// failure of one record (too large for the broker) marks every
		// record of its partition batch. Isolate those by writing each of
		// them alone. The relay keeps at most one record per key in
		// flight, so this does not reorder a key.
		var isolate []int
		for j, e := range werrs {
			if e == nil {
				continue
			}
			cerr := Classify(e)
			if outbox.IsPermanent(cerr) && len(batch) > 1 {
				isolate = append(isolate, pending[j])
				continue
			}
			errs[pending[j]] = cerr
		}
		// One at a time: concurrent calls would be batched together again.
		for _, i := range isolate {
			if err := d.writer.WriteMessages(ctx, recs[i]); err != nil {
				errs[i] = Classify(unwrapSingle(err))
			}
		}
		return
	}
}

func unwrapSingle(err error) error {
	var werrs kafkago.WriteErrors
	if errors.As(err, &werrs) && len(werrs) == 1 && werrs[0] != nil {
		return werrs[0]
	}
	var tooLarge kafkago.MessageTooLargeError
	if errors.As(err, &tooLarge) {
		return kafkago.MessageSizeTooLarge
	}
	return err
}

func indexOfRecord(batch []kafkago.Message, m kafkago.Message) int {
	id := headerValue(m.Headers, HeaderMessageID)
	for j := range batch {
		if headerValue(batch[j].Headers, HeaderMessageID) == id {
			return j
		}
	}
	return -1
}

func headerValue(hs []kafkago.Header, k string) string {
	for _, h := range hs {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}
