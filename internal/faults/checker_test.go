package faults

import (
	"strings"
	"testing"
	"time"
)

func rowsOf(n int) []Row {
	var rows []Row
	for i := 0; i < n; i++ {
		rows = append(rows, Row{ID: "id" + string(rune('a'+i)), Key: "k", Topic: "order.created", Sequence: int64(i + 1), N: i, State: "sent", Dest: "events"})
	}
	return rows
}

func deliveryOf(r Row) Delivery {
	return Delivery{Dest: r.Dest, ID: r.ID, Key: r.Key, Topic: r.Topic, N: r.N}
}

func TestCheckAcceptsACleanRun(t *testing.T) {
	rows := rowsOf(3)
	var ds []Delivery
	for _, r := range rows {
		ds = append(ds, deliveryOf(r))
	}
	r := Check(Input{Rows: rows, Deliveries: ds, Published: map[string]int{"events": 5}})
	if !r.OK() || r.Delivered != 3 || r.Sent != 3 || r.DuplicatesSeen != 0 || r.DuplicatesAbsorbed != 2 {
		t.Fatalf("clean run: %v", r)
	}
}

func TestCheckCountsARedeliveryAfterALaterRowAsDuplicate(t *testing.T) {
	rows := rowsOf(3)
	ds := []Delivery{deliveryOf(rows[0]), deliveryOf(rows[1]), deliveryOf(rows[0]), deliveryOf(rows[2])}
	r := Check(Input{Rows: rows, Deliveries: ds})
	if !r.OK() || r.DuplicatesSeen != 1 || r.DuplicatesAbsorbed != -1 {
		t.Fatalf("redelivery of an earlier row: %v", r)
	}
}

func TestCheckFindsViolations(t *testing.T) {
	cases := []struct {
		name string
		edit func(rows []Row, ds []Delivery) ([]Row, []Delivery)
		want string
	}{
		{"out of order", func(rows []Row, ds []Delivery) ([]Row, []Delivery) {
			ds[0], ds[1] = ds[1], ds[0]
			return rows, ds
		}, "out of order"},
		{"lost", func(rows []Row, ds []Delivery) ([]Row, []Delivery) { return rows, ds[:2] }, "never received it: lost"},
		{"dead without reason", func(rows []Row, ds []Delivery) ([]Row, []Delivery) {
			rows[2].State = "dead"
			return rows, ds[:2]
		}, "without a reason"},
		{"duplicate with another row's payload", func(rows []Row, ds []Delivery) ([]Row, []Delivery) {
			d := ds[0]
			d.N = 7
			return rows, append(ds, d)
		}, "carries key"},
		{"unknown id", func(rows []Row, ds []Delivery) ([]Row, []Delivery) {
			return rows, append(ds, Delivery{Dest: "events", ID: "nope"})
		}, "no row's id"},
		{"wrong destination", func(rows []Row, ds []Delivery) ([]Row, []Delivery) {
			ds[2].Dest = "hooks"
			return rows, ds
		}, "routes to events but was delivered to hooks"},
		{"pending", func(rows []Row, ds []Delivery) ([]Row, []Delivery) {
			rows[2].State = "pending"
			return rows, ds[:2]
		}, "still pending"},
		{"stuck", func(rows []Row, ds []Delivery) ([]Row, []Delivery) {
			rows[2].State, rows[2].LeaseExpiredAgo = "processing", time.Minute
			return rows, ds[:2]
		}, "stuck processing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rows := rowsOf(3)
			var ds []Delivery
			for _, r := range rows {
				ds = append(ds, deliveryOf(r))
			}
			rows, ds = tc.edit(rows, ds)
			r := Check(Input{Rows: rows, Deliveries: ds, LeaseGrace: time.Second})
			if r.OK() || !strings.Contains(r.String(), tc.want) {
				t.Fatalf("want a problem mentioning %q, got %v", tc.want, r)
			}
		})
	}
}

func TestCheckAcceptsDeadRowsWithAReasonAndUnkeyedRowsInAnyOrder(t *testing.T) {
	rows := rowsOf(3)
	for i := range rows {
		rows[i].Key = ""
	}
	rows[1].State, rows[1].LastError, rows[1].Dest = "dead", "no route matches topic", ""
	ds := []Delivery{deliveryOf(rows[2]), deliveryOf(rows[0])}
	r := Check(Input{Rows: rows, Deliveries: ds})
	if !r.OK() || r.Dead != 1 || r.Delivered != 2 {
		t.Fatalf("unkeyed rows and a dead row: %v", r)
	}
	// Per-key order is per destination: the same key may interleave
	// across two receivers.
	rows = rowsOf(2)
	rows[1].Dest = "hooks"
	r = Check(Input{Rows: rows, Deliveries: []Delivery{deliveryOf(rows[1]), deliveryOf(rows[0])}})
	if !r.OK() {
		t.Fatalf("one key over two destinations: %v", r)
	}
}
