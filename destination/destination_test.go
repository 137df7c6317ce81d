package destination_test

import (
	"errors"
	"testing"

	"github.com/queuebox/queuebox/destination"
	"github.com/queuebox/queuebox/outbox"
)

func TestErrorAt(t *testing.T) {
	refused := errors.New("refused")
	whole := outbox.Unavailable(errors.New("down"))
	batch := destination.NewBatchError([]error{nil, refused})
	for _, c := range []struct {
		name string
		err  error
		i    int
		sent bool
		want error
	}{
		{"no error", nil, 3, true, nil},
		{"whole batch failed", whole, 1, false, whole},
		{"accepted in a batch error", batch, 0, true, nil},
		{"failed in a batch error", batch, 1, false, refused},
		// An adapter that answered for fewer messages than it was given:
		// the others are not sent.
		{"missing from a batch error", batch, 2, false, nil},
		{"negative index", batch, -1, false, nil},
	} {
		got := destination.ErrorAt(c.err, c.i)
		if (got == nil) != c.sent {
			t.Errorf("%s: ErrorAt = %v, sent %v; want sent %v", c.name, got, got == nil, c.sent)
		}
		if c.want != nil && !errors.Is(got, c.want) {
			t.Errorf("%s: ErrorAt = %v, want %v", c.name, got, c.want)
		}
		if got != nil && !outbox.IsRetryable(got) {
			t.Errorf("%s: ErrorAt = %v, want retryable", c.name, got)
		}
	}
}

func TestHeaderFilter(t *testing.T) {
	var dropped []string
	f := destination.NewHeaderFilter([]string{"Nats-TTL", "x-delay", "X-Message-Id"}, func(n string) { dropped = append(dropped, n) })
	for name, want := range map[string]bool{"nats-ttl": true, "X-DELAY": true, "x-death": false, "x-message-id": false, "Nats-Msg-Id": false} {
		if got := f.Allowed(name); got != want {
			t.Errorf("Allowed(%q) = %v, want %v", name, got, want)
		}
	}
	f.Dropped("CC")
	var none *destination.HeaderFilter
	if none.Allowed("x-delay") {
		t.Error("a nil filter allows")
	}
	none.Dropped("CC")
	if len(dropped) != 1 || dropped[0] != "CC" {
		t.Errorf("dropped %v", dropped)
	}
}

func TestContainsFold(t *testing.T) {
	for _, c := range []struct {
		s, substr string
		want      bool
	}{
		{"x-nats-msg-id-y", "Nats-Msg-Id", true},
		{"NATS-MSG-ID", "nats-msg-id", true},
		{"Nats-Msg-I", "Nats-Msg-Id", false},
		{"NNats-Msg-Id", "nats-msg-id", true},
		{"Nats_Msg_Id", "nats-msg-id", false},
		{"", "msg-id", false},
		{"anything", "", true},
		{"ünïcode MSG-ID", "msg-id", true},
		{"msg-ıd", "msg-id", false}, // dotless ı is not an ASCII i
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "nats-msg-id", false},
	} {
		if got := destination.ContainsFold(c.s, c.substr); got != c.want {
			t.Errorf("ContainsFold(%q, %q) = %v, want %v", c.s, c.substr, got, c.want)
		}
	}
	found := false
	if n := testing.AllocsPerRun(100, func() { found = destination.ContainsFold("X-Nats-Msg-Id-Value", "nats-msg-ID") }); n != 0 || !found {
		t.Errorf("ContainsFold allocates %v times per call (want 0), found %v", n, found)
	}
}
