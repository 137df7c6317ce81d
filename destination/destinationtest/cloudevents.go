package destinationtest

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/queuebox/queuebox/outbox"
)

// CheckCloudEvent compares an event, in the JSON event format (as a
// CloudEvents SDK that read a delivery writes it), with the row m it was
// made from: id is the row id, time its created_at, subject its key,
// datacontenttype application/json, data the payload, and source and type
// the rendered templates.
func CheckCloudEvent(t *testing.T, event []byte, m outbox.Message, source, typ string) {
	t.Helper()
	var ev struct {
		SpecVersion     string          `json:"specversion"`
		ID              string          `json:"id"`
		Source          string          `json:"source"`
		Type            string          `json:"type"`
		Subject         string          `json:"subject"`
		Time            time.Time       `json:"time"`
		DataContentType string          `json:"datacontenttype"`
		Data            json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(event, &ev); err != nil {
		t.Fatalf("event %s: %v", event, err)
	}
	for _, c := range []struct{ name, got, want string }{
		{"specversion", ev.SpecVersion, "1.0"},
		{"id", ev.ID, m.ID},
		{"source", ev.Source, source},
		{"type", ev.Type, typ},
		{"subject", ev.Subject, m.Key},
		{"datacontenttype", ev.DataContentType, "application/json"},
	} {
		if c.got != c.want {
			t.Errorf("event %s: %s = %q, want %q", m.ID, c.name, c.got, c.want)
		}
	}
	if !ev.Time.Equal(m.CreatedAt) {
		t.Errorf("event %s: time %v, want created_at %v", m.ID, ev.Time, m.CreatedAt)
	}
	var got, want any
	if err := json.Unmarshal(ev.Data, &got); err != nil {
		t.Fatalf("event %s: data %s: %v", m.ID, ev.Data, err)
	}
	if err := json.Unmarshal(m.Payload, &want); err != nil {
		t.Fatalf("row %s: payload %s: %v", m.ID, m.Payload, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("event %s: data %s, want the payload %s", m.ID, ev.Data, m.Payload)
	}
}
