package outbox

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestMarks: each mark is found through wrapping, is not taken for another,
// keeps the error's text, and leaves nil nil.
func TestMarks(t *testing.T) {
	base := errors.New("broker said no")
	marks := []struct {
		name string
		mark func(error) error
		is   func(error) bool
	}{
		{"permanent", Permanent, IsPermanent},
		{"unavailable", Unavailable, IsUnavailable},
		{"maybe applied", MaybeApplied, IsMaybeApplied},
	}
	for i, m := range marks {
		if m.mark(nil) != nil {
			t.Errorf("%s(nil) is not nil", m.name)
		}
		err := fmt.Errorf("publish: %w", m.mark(base))
		if !m.is(err) || !errors.Is(err, base) || err.Error() != "publish: broker said no" {
			t.Errorf("%s: is %v, wraps base %v, text %q", m.name, m.is(err), errors.Is(err, base), err)
		}
		for j, other := range marks {
			if j != i && other.is(err) {
				t.Errorf("an error marked %s reads as %s", m.name, other.name)
			}
		}
	}
	if !IsRetryable(base) || IsRetryable(Permanent(base)) || IsRetryable(nil) {
		t.Error("IsRetryable: want true for an unmarked error, false for a permanent one and for nil")
	}
	if d, ok := RetryDelay(fmt.Errorf("x: %w", RetryAfter(Unavailable(base), time.Second))); !ok || d != time.Second {
		t.Errorf("RetryDelay through marks: %v, %v", d, ok)
	}
}

// TestNoRoom: the back-pressure mark carries its limit through wrapping,
// is neither permanent nor unavailable, and leaves nil nil.
func TestNoRoom(t *testing.T) {
	if NoRoom("max_msgs", nil) != nil {
		t.Fatal("NoRoom(nil) is not nil")
	}
	base := errors.New("maximum messages exceeded")
	err := fmt.Errorf("publish: %w", NoRoom("max_msgs", base))
	limit, ok := NoRoomLimit(err)
	if !ok || limit != "max_msgs" || !IsNoRoom(err) || !errors.Is(err, base) {
		t.Fatalf("NoRoomLimit = %q, %v; IsNoRoom %v; wraps base %v", limit, ok, IsNoRoom(err), errors.Is(err, base))
	}
	if IsPermanent(err) || IsUnavailable(err) || !IsRetryable(err) {
		t.Error("a NoRoom error reads as permanent or unavailable, or not retryable")
	}
	if IsNoRoom(base) || IsNoRoom(Unavailable(base)) {
		t.Error("an unmarked or unavailable error reads as NoRoom")
	}
}
