package kafka

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/destination/cloudevents"
	"github.com/queuebox/queuebox/outbox"
)

// Record returns the Kafka record Publish writes for m.
func (d *Destination) Record(m *outbox.Message) (kafkago.Message, error) {
	topic, err := d.topic.Render(m)
	if err != nil {
		return kafkago.Message{}, err
	}
	if topic == "" {
		return kafkago.Message{}, outbox.Permanent(fmt.Errorf("kafka: topic template %q renders empty for this row", d.topic))
	}
	if err := checkTopic(topic); err != nil {
		return kafkago.Message{}, err
	}
	key, err := d.key.Render(m)
	if err != nil {
		return kafkago.Message{}, err
	}
	rec := kafkago.Message{Topic: topic, Value: m.Payload, Headers: headers(m, d.filter, d.events != nil)}
	if d.events != nil {
		if rec.Value, rec.Headers, err = d.event(m, rec.Headers); err != nil {
			return kafkago.Message{}, err
		}
	}
	if key != "" {
		rec.Key = []byte(key)
	}
	return rec, nil
}

// Headers returns the record headers for m: X-Message-Id, X-Topic and
// X-Attempt, then the row headers in name order. A row header named like
// one of the three (any case) is dropped, as on the NATS and HTTP
// destinations: X-Attempt is 0 on the first delivery, and no
// row can say otherwise.
func Headers(m *outbox.Message) []kafkago.Header { return headers(m, nil, false) }

// ownHeader reports a header name queuebox sets on every record, in any
// case: a row header of that name is never sent.
func ownHeader(k string) bool {
	return strings.EqualFold(k, HeaderMessageID) || strings.EqualFold(k, HeaderTopic) || strings.EqualFold(k, HeaderAttempt)
}

// headers is Headers reporting each row header dropped to f; with events,
// a row header in the CloudEvents namespace (ce_*, content-type) is
// dropped too.
func headers(m *outbox.Message, f *destination.HeaderFilter, events bool) []kafkago.Header {
	hs := make([]kafkago.Header, 0, 3+len(m.Headers))
	hs = append(hs,
		kafkago.Header{Key: HeaderMessageID, Value: []byte(m.ID)},
		kafkago.Header{Key: HeaderTopic, Value: []byte(m.Topic)},
		kafkago.Header{Key: HeaderAttempt, Value: []byte(strconv.Itoa(m.Attempt))})
	names := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		if ownHeader(k) || events && cloudevents.InNamespace(k, ceHeaderPrefix) {
			f.Dropped(k)
			continue
		}
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		hs = append(hs, kafkago.Header{Key: k, Value: []byte(m.Headers[k])})
	}
	return hs
}

// ceHeaderPrefix is the prefix of the CloudEvents attributes in Kafka
// headers (binary mode); the content type is the content-type header.
const ceHeaderPrefix = "ce_"

// event returns the record value and headers of m as a CloudEvent: in
// binary mode the payload, with ce_* and content-type headers; in
// structured mode the event, with content-type.
func (d *Destination) event(m *outbox.Message, hs []kafkago.Header) ([]byte, []kafkago.Header, error) {
	if d.events.Structured() {
		ev, err := d.events.Event(m)
		hs = append(hs, kafkago.Header{Key: "content-type", Value: []byte(cloudevents.ContentTypeStructured)})
		return ev, hs, err
	}
	attrs, err := d.events.Attributes(m)
	if err != nil {
		return nil, nil, err
	}
	for _, a := range attrs {
		hs = append(hs, kafkago.Header{Key: ceHeaderPrefix + a.Name, Value: []byte(a.Value)})
	}
	hs = append(hs, kafkago.Header{Key: "content-type", Value: []byte(cloudevents.DataContentType)})
	return m.Payload, hs, nil
}
