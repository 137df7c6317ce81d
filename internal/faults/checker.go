package faults

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Row is one outbox row as the table holds it at the end of a run.
type Row struct {
	ID, Key, Topic string
	Sequence       int64
	// N is the row's number within its key, as written in its payload; a
	// delivery carrying the row's id must carry the same N.
	N         int
	State     string
	LastError string
	// Dest is the destination the row routes to; "" when the row routes
	// nowhere (it must then be dead).
	Dest string
	// LeaseExpiredAgo is, for a processing row, how long ago its lease
	// expired on the database clock (zero or negative: not expired).
	LeaseExpiredAgo time.Duration
}

// Delivery is one message a receiver got: a JetStream stream message in
// stream order, or an HTTP request in arrival order.
type Delivery struct {
	Dest           string
	ID, Key, Topic string
	N              int
	At             time.Time
}

// Input is everything Check reads.
type Input struct {
	Rows       []Row
	Deliveries []Delivery
	// Published counts, per destination, the messages seen on the wire
	// (a core NATS subscriber next to the JetStream stream sees every
	// publish, duplicates included). Published minus stored is the number
	// of duplicates JetStream absorbed. Optional.
	Published map[string]int
	// LeaseGrace is how long a processing row may stay past its lease
	// before it counts as stuck (the reaper's interval plus slack).
	LeaseGrace time.Duration
}

// Report is the outcome of Check.
type Report struct {
	Rows       int
	Sent       int
	Dead       int
	Pending    int
	Processing int
	// Delivered is the number of distinct row ids the receivers got.
	Delivered int
	// DeadDelivered counts dead rows a receiver got anyway (a timeout
	// after the receiver had accepted the message).
	DeadDelivered int
	// DuplicatesSeen counts deliveries of an id the same receiver had
	// already got.
	DuplicatesSeen int
	// DuplicatesSeenBy splits DuplicatesSeen by destination.
	DuplicatesSeenBy map[string]int
	// DuplicatesAbsorbed counts publishes JetStream dropped as duplicates
	// (Published minus stored); -1 when not measured.
	DuplicatesAbsorbed int
	// Stuck counts processing rows past their lease plus LeaseGrace.
	Stuck    int
	Problems []string
}

// OK reports whether the run kept every promise.
func (r Report) OK() bool { return len(r.Problems) == 0 }

func (r Report) String() string {
	s := fmt.Sprintf("rows=%d sent=%d dead=%d pending=%d processing=%d delivered=%d dead_delivered=%d duplicates_seen=%d %v duplicates_absorbed=%d stuck=%d",
		r.Rows, r.Sent, r.Dead, r.Pending, r.Processing, r.Delivered, r.DeadDelivered, r.DuplicatesSeen, r.DuplicatesSeenBy, r.DuplicatesAbsorbed, r.Stuck)
	if len(r.Problems) > 0 {
		const show = 20
		s += fmt.Sprintf("\n%d problem(s):", len(r.Problems))
		for i, p := range r.Problems {
			if i == show {
				s += fmt.Sprintf("\n  ... and %d more", len(r.Problems)-show)
				break
			}
			s += "\n  " + p
		}
	}
	return s
}

// Check asserts the delivery promise over a finished run:
//
//   - every row is sent and reached its destination, or is dead with a
//     reason (a non-empty last_error); a row still pending or processing
//     is unsettled;
//   - per destination and key, the first delivery of each id arrives in
//     increasing sequence order (a later redelivery of an id already
//     delivered is a duplicate, not an order violation);
//   - every delivery, duplicates included, carries the id, key, topic and
//     payload of one and the same row;
//   - no row is processing past its lease plus in.LeaseGrace.
func Check(in Input) Report {
	r := Report{Rows: len(in.Rows), DuplicatesAbsorbed: -1, DuplicatesSeenBy: map[string]int{}}
	problem := func(format string, args ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, args...)) }

	rows := make(map[string]*Row, len(in.Rows))
	for i := range in.Rows {
		row := &in.Rows[i]
		if _, dup := rows[row.ID]; dup {
			problem("row id %s appears twice in the table", row.ID)
		}
		rows[row.ID] = row
	}

	type destKey struct{ dest, key string }
	seen := map[destKey]int{}      // dest+id -> deliveries
	lastSeq := map[destKey]int64{} // dest+key -> sequence of the last first delivery
	lastID := map[destKey]string{} // dest+key -> id of that delivery
	delivered := map[string]bool{} // id -> reached its destination
	received := map[string]int{}   // dest -> deliveries, duplicates included
	for _, d := range in.Deliveries {
		received[d.Dest]++
		row, ok := rows[d.ID]
		if !ok {
			problem("%s: delivery with id %q, which is no row's id", d.Dest, d.ID)
			continue
		}
		if d.Key != row.Key || d.Topic != row.Topic || d.N != row.N {
			problem("%s: delivery with id %s carries key %q topic %q n=%d, but that row has key %q topic %q n=%d",
				d.Dest, d.ID, d.Key, d.Topic, d.N, row.Key, row.Topic, row.N)
		}
		if row.Dest != "" && d.Dest != row.Dest {
			problem("row %s (topic %s) routes to %s but was delivered to %s", d.ID, row.Topic, row.Dest, d.Dest)
		}
		id := destKey{d.Dest, d.ID}
		seen[id]++
		if seen[id] > 1 {
			r.DuplicatesSeen++
			r.DuplicatesSeenBy[d.Dest]++
			continue
		}
		delivered[d.ID] = true
		if row.Key == "" {
			continue
		}
		k := destKey{d.Dest, row.Key}
		if prev, ok := lastSeq[k]; ok && row.Sequence <= prev {
			problem("%s: key %q out of order: row %s (sequence %d, n=%d) first delivered after row %s (sequence %d)",
				d.Dest, row.Key, row.ID, row.Sequence, row.N, lastID[k], prev)
		}
		lastSeq[k], lastID[k] = row.Sequence, row.ID
	}
	r.Delivered = len(delivered)

	for i := range in.Rows {
		row := &in.Rows[i]
		switch row.State {
		case "sent":
			r.Sent++
			if !delivered[row.ID] {
				problem("row %s (key %q, topic %s) is sent but %s never received it: lost", row.ID, row.Key, row.Topic, orNone(row.Dest))
			}
		case "dead":
			r.Dead++
			if strings.TrimSpace(row.LastError) == "" {
				problem("row %s (topic %s) is dead without a reason (empty last_error)", row.ID, row.Topic)
			}
			if delivered[row.ID] {
				r.DeadDelivered++
			}
		case "pending":
			r.Pending++
			problem("row %s (key %q, topic %s) is still pending: not delivered", row.ID, row.Key, row.Topic)
		case "processing":
			r.Processing++
			if row.LeaseExpiredAgo > in.LeaseGrace {
				r.Stuck++
				problem("row %s is stuck processing %v past its lease", row.ID, row.LeaseExpiredAgo.Round(time.Millisecond))
			} else {
				problem("row %s (key %q, topic %s) is still processing: not settled", row.ID, row.Key, row.Topic)
			}
		default:
			problem("row %s has unknown state %q", row.ID, row.State)
		}
	}

	if in.Published != nil {
		r.DuplicatesAbsorbed = 0
		dests := make([]string, 0, len(in.Published))
		for d := range in.Published {
			dests = append(dests, d)
		}
		sort.Strings(dests)
		for _, d := range dests {
			if n := in.Published[d] - received[d]; n > 0 {
				r.DuplicatesAbsorbed += n
			}
		}
	}
	return r
}

func orNone(s string) string {
	if s == "" {
		return "any receiver"
	}
	return s
}
