package relay

import (
	"testing"
	"time"

	"github.com/queuebox/queuebox/outbox"
)

// TestKeySetTellsSettlingFromOverdue: a key whose row was just claimed is
// about to settle; past the patience it is overdue; a key whose last row
// took longer than the patience is taken for overdue at once next time,
// until a row of it settles quickly again.
func TestKeySetTellsSettlingFromOverdue(t *testing.T) {
	k := keySet{m: map[string]keyRows{}}
	msgs := []outbox.Message{{Key: "fast"}, {Key: "slow"}}
	now := time.Now()
	k.add(msgs, now)
	if held, soon := k.state("fast"); !held || !soon {
		t.Fatalf("a key just claimed: held %v, soon %v; want both", held, soon)
	}
	if held, soon := k.state("other"); held || soon {
		t.Fatal("a key not in flight here reads as held")
	}
	k.add(msgs[1:], now.Add(-time.Hour)) // a second row of slow, long out
	if _, soon := k.state("slow"); !soon {
		t.Fatal("the first row decides since when a key is held")
	}
	k.remove([]outcome{{msg: &msgs[1]}, {msg: &msgs[1]}}, now.Add(-time.Hour))
	k.remove([]outcome{{msg: &msgs[0]}}, now)
	k.add(msgs, time.Now())
	if held, soon := k.state("slow"); !held || soon {
		t.Fatalf("a key whose last row took an hour: held %v, soon %v; want held, overdue", held, soon)
	}
	if _, soon := k.state("fast"); !soon {
		t.Fatal("a fast key reads as overdue")
	}
	k.remove([]outcome{{msg: &msgs[1]}}, time.Now())
	k.add(msgs[1:], time.Now())
	if _, soon := k.state("slow"); !soon {
		t.Fatal("a slow key whose row settled quickly again still reads as overdue")
	}
}
