package amqp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/destination/amqp"
	"github.com/queuebox/queuebox/destination/cloudevents"
	"github.com/queuebox/queuebox/destination/destinationtest"
	"github.com/queuebox/queuebox/internal/testenv"
	"github.com/queuebox/queuebox/outbox"
)

// ceDelivery reads an AMQP 0.9.1 delivery as the CloudEvents AMQP binding
// reads an AMQP message: the headers table for the application
// properties, the content_type property, the body for the data. The SDK's
// own AMQP protocol module (an AMQP 1.0 client) is not used: the SDK's
// binding and spec packages do the reading, from these three parts.
type ceDelivery struct {
	d       amqp091.Delivery
	version spec.Version
	format  format.Format
}

const ceAMQPPrefix = "cloudEvents:"

var ceSpecs = spec.WithPrefix(ceAMQPPrefix)

func newCEDelivery(d amqp091.Delivery) *ceDelivery {
	m := &ceDelivery{d: d}
	if format.IsFormat(d.ContentType) {
		m.format = format.Lookup(d.ContentType)
	} else if sv, ok := d.Headers[ceSpecs.PrefixedSpecVersionName()].(string); ok {
		m.version = ceSpecs.Version(sv)
	}
	return m
}

func (m *ceDelivery) ReadEncoding() binding.Encoding {
	switch {
	case m.version != nil:
		return binding.EncodingBinary
	case m.format != nil:
		return binding.EncodingStructured
	}
	return binding.EncodingUnknown
}

func (m *ceDelivery) ReadStructured(ctx context.Context, w binding.StructuredWriter) error {
	if m.format == nil {
		return binding.ErrNotStructured
	}
	return w.SetStructuredEvent(ctx, m.format, bytes.NewReader(m.d.Body))
}

func (m *ceDelivery) ReadBinary(_ context.Context, w binding.BinaryWriter) error {
	if m.version == nil {
		return binding.ErrNotBinary
	}
	if m.d.ContentType != "" {
		if err := w.SetAttribute(m.version.AttributeFromKind(spec.DataContentType), m.d.ContentType); err != nil {
			return err
		}
	}
	for k, v := range m.d.Headers {
		if !strings.HasPrefix(k, ceAMQPPrefix) {
			continue
		}
		var err error
		if attr := m.version.Attribute(k); attr != nil {
			err = w.SetAttribute(attr, v)
		} else {
			err = w.SetExtension(strings.ToLower(strings.TrimPrefix(k, ceAMQPPrefix)), v)
		}
		if err != nil {
			return err
		}
	}
	if len(m.d.Body) > 0 {
		return w.SetData(bytes.NewReader(m.d.Body))
	}
	return nil
}

func (m *ceDelivery) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	if attr := m.version.AttributeFromKind(k); attr != nil {
		return attr, m.d.Headers[attr.PrefixedName()]
	}
	return nil, nil
}

func (m *ceDelivery) GetExtension(name string) any { return m.d.Headers[ceAMQPPrefix+name] }

func (m *ceDelivery) Finish(error) error { return nil }

// TestCloudEventsReadBySDK: each message, read back from RabbitMQ, is the
// event of its row for the CloudEvents SDK, in binary and in structured
// mode; a row cannot set an attribute.
func TestCloudEventsReadBySDK(t *testing.T) {
	url := testenv.AMQPURL(t)
	for _, mode := range []string{cloudevents.Binary, cloudevents.Structured} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			adm := testenv.NewAMQPAdmin(t, url)
			ex := testenv.AMQPName(t, "ce")
			adm.Exchange(ex, "topic")
			q := adm.Queue("q", ex, "billing.#")
			d := newDest(t, amqp.Options{URL: url, Exchange: ex, CloudEvents: &cloudevents.Options{Mode: mode, Source: "/billing"}})
			created := time.Now().Add(-time.Minute)
			msgs := []outbox.Message{
				{ID: destinationtest.NewID(), Topic: "billing.invoice", Key: "customer-42", CreatedAt: created, Payload: []byte(`{"total":12.5}`),
					Headers: map[string]string{"cloudEvents:id": "forged", "cloudevents:tenant": "forged", "cloudEvents_type": "forged"}},
				{ID: destinationtest.NewID(), Topic: "billing.refund", CreatedAt: created, Payload: []byte(`{"n":[1]}`), Headers: map[string]string{}},
			}
			if err := d.Publish(testenv.Context(t, 10*time.Second), msgs); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			got := adm.Consume(q, len(msgs), 10*time.Second)
			if len(got) != len(msgs) {
				t.Fatalf("consumed %d messages, want %d", len(got), len(msgs))
			}
			for i, dl := range got {
				m := msgs[i]
				ev, err := binding.ToEvent(t.Context(), newCEDelivery(dl))
				if err != nil {
					t.Fatalf("message %s: the SDK cannot read it: %v", m.ID, err)
				}
				if err := ev.Validate(); err != nil {
					t.Errorf("message %s: invalid event: %v", m.ID, err)
				}
				if dl.MessageId != m.ID {
					t.Errorf("message %s: message_id %q", m.ID, dl.MessageId)
				}
				raw, _ := json.Marshal(ev)
				if strings.Contains(string(raw), "forged") {
					t.Errorf("message %s: a row header set an attribute: %s", m.ID, raw)
				}
				destinationtest.CheckCloudEvent(t, raw, m, "/billing", m.Topic)
			}
		})
	}
}
