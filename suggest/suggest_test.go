package suggest

import "testing"

func TestClosest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string
	}{
		{"batchsize", "batchSize"},
		{"hookz", "hooks"},
		{"relays", "relay"},
		{"subjekt", "subject"},
		{"zzzzzz", ""},
		{"ROUTES", "routes"}, // case only
		{"bodi", ""},         // no candidate near
		{"rts", ""},          // 3 letters allow one edit: "routes" is 3 away
		{"subjectt", "subject"},
		{"rleay", "relay"}, // two letters swapped: two edits
	}
	for _, tt := range tests {
		got, _ := Closest(tt.in, []string{"batchSize", "hooks", "relay", "subject", "routes"})
		if got != tt.want {
			t.Errorf("Closest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestDidYouMean(t *testing.T) {
	t.Parallel()
	// Three letters allow one edit; a swap is two.
	if got := DidYouMean("kye", []string{"key", "id"}); got != "" {
		t.Errorf("DidYouMean(kye) = %q, want empty", got)
	}
	if got := DidYouMean("kez", []string{"key", "id"}); got != ` (did you mean "key"?)` {
		t.Errorf("DidYouMean(kez) = %q", got)
	}
	if got := DidYouMean("paylaod", []string{"body", "payload"}); got != ` (did you mean "payload"?)` {
		t.Errorf("DidYouMean = %q", got)
	}
	if got := DidYouMean("x", []string{"payload"}); got != "" {
		t.Errorf("DidYouMean far = %q, want empty", got)
	}
	long := string(make([]byte, 300))
	if got, ok := Closest(long, []string{long}); !ok || got != long {
		t.Errorf("a long string equal to a candidate is still found: %q %v", got, ok)
	}
	if _, ok := Closest(long+"a", []string{long}); ok {
		t.Error("a long string is never a typo of another")
	}
}
