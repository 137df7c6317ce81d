package amqp

import (
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/destination/cloudevents"
	"github.com/queuebox/queuebox/outbox"
)

// Properties returns the AMQP message Publish sends for m, under the
// default row-header policy (no allowHeaders).
func Properties(m *outbox.Message) amqp.Publishing { return properties(m, nil, false) }

func (d *Destination) properties(m *outbox.Message) (amqp.Publishing, error) {
	p := properties(m, d.filter, d.events != nil)
	switch {
	case d.events == nil:
		return p, nil
	case d.events.Structured():
		body, err := d.events.Event(m)
		p.Body, p.ContentType = body, cloudevents.ContentTypeStructured
		return p, err
	}
	attrs, err := d.events.Attributes(m)
	for _, a := range attrs {
		p.Headers[ceHeaderPrefix+a.Name] = a.Value
	}
	return p, err
}

// ceHeaderPrefix is the prefix of the CloudEvents attributes in AMQP
// headers (binary mode; the AMQP binding's application properties); the
// content type is the content_type property.
const ceHeaderPrefix = "cloudEvents:"

// dropHeader reports whether row header k is not sent: the headers
// queuebox sets (any case), always; RabbitMQ's
// reserved x- namespace (x-delay, x-death, x-match,
// x-deduplication-header: RabbitMQ and its plugins read them by their
// exact, lower-case name) and the sender-selected distribution headers CC
// and BCC (any case: they route a copy to other queues), unless allowed.
func dropHeader(k string, f *destination.HeaderFilter, events bool) bool {
	switch {
	case events && (cloudevents.InNamespace(k, ceHeaderPrefix) || cloudevents.InNamespace(k, "cloudEvents_")):
		return true
	case strings.EqualFold(k, HeaderTopic), strings.EqualFold(k, HeaderAttempt), strings.EqualFold(k, HeaderMessageKey):
		return true
	case strings.HasPrefix(k, "x-"), strings.EqualFold(k, "CC"), strings.EqualFold(k, "BCC"):
		return !f.Allowed(k)
	}
	return false
}

func properties(m *outbox.Message, f *destination.HeaderFilter, events bool) amqp.Publishing {
	h := amqp.Table{
		HeaderTopic:   m.Topic,
		HeaderAttempt: int64(m.Attempt),
	}
	if m.Key != "" {
		h[HeaderMessageKey] = m.Key
	}
	// Row headers are added unless the policy drops them (dropHeader):
	// x-attempt is 0 on the first delivery, and no row can
	// say otherwise. The identity is the message_id property, which no
	// header can reach.
	for k, v := range m.Headers {
		if dropHeader(k, f, events) {
			f.Dropped(k)
			continue
		}
		h[k] = v
	}
	return amqp.Publishing{
		MessageId:    m.ID,
		DeliveryMode: amqp.Persistent,
		ContentType:  ContentType,
		Timestamp:    m.CreatedAt,
		Headers:      h,
		Body:         m.Payload,
	}
}
