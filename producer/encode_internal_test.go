package producer

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The SQL Server statement reads fields the PostgreSQL one does not need;
// check the document it is given, since no SQL Server runs the statement
// in these tests.
func TestSQLServerDocument(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 123456700, time.FixedZone("CET", 3600))
	rows, _, err := prepare([]Message{
		{Topic: "a", Payload: 42},
		{Topic: "b", Payload: json.RawMessage(`{"x":"<&>"}`), Delay: 90*time.Second + 1500*time.Microsecond, MaxAttempts: 3},
		{Topic: "c", Payload: "s", ScheduledAt: at},
	}, SQLServer)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rows)
	if err != nil {
		t.Fatal(err)
	}
	var doc []map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	// Scalar payloads travel as JSON text in a JSON string (AS JSON would
	// read a scalar as NULL).
	if doc[0]["payload"] != "42" || doc[1]["payload"] != `{"x":"<&>"}` || doc[2]["payload"] != `"s"` {
		t.Errorf("payloads %v %v %v", doc[0]["payload"], doc[1]["payload"], doc[2]["payload"])
	}
	// delay_s is always present: DATEADD with NULL would make scheduled_at
	// NULL.
	if doc[0]["delay_s"] != 0.0 || doc[0]["delay_us"] != 0.0 || doc[1]["delay_s"] != 90.0 || doc[1]["delay_us"] != 1500.0 {
		t.Errorf("delays %v %v / %v %v", doc[0]["delay_s"], doc[0]["delay_us"], doc[1]["delay_s"], doc[1]["delay_us"])
	}
	if doc[2]["scheduled_at"] != "2030-01-02T02:04:05.1234567" {
		t.Errorf("scheduled_at %v, want UTC without a zone", doc[2]["scheduled_at"])
	}
	if doc[0]["max_attempts"] != nil || doc[1]["max_attempts"] != 3.0 {
		t.Errorf("max attempts %v %v", doc[0]["max_attempts"], doc[1]["max_attempts"])
	}
	if doc[0]["key"] != nil || !strings.Contains(string(b), `"headers":{}`) {
		t.Errorf("key %v, document %s", doc[0]["key"], b)
	}
	if rs := runs(rows); len(rs) != 3 || rs[1].withMax != true || len(rs[0].rows) != 1 {
		t.Errorf("runs %+v", rs)
	}
}

func TestHasNULEscape(t *testing.T) {
	for _, c := range []struct {
		json string
		want bool
	}{
		{`{"a":"x\u0000y"}`, true},
		{`"\u0000"`, true},
		{`"\\u0000"`, false},   // an escaped backslash, then the text u0000
		{`"\\\u0000"`, true},   // an escaped backslash, then the escape
		{`"\u00000"`, true},    // the escape, then a 0
		{`"\u0001 \n"`, false}, // other escapes
		{`{"u0000":1}`, false},
	} {
		if got := hasNULEscape([]byte(c.json)); got != c.want {
			t.Errorf("hasNULEscape(%s) = %v, want %v", c.json, got, c.want)
		}
	}
}
