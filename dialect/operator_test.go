package dialect

import (
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/outbox"
)

// TestTimeBoundsUsable: a table without updatedAt cannot be selected by
// time, and the error names the bounds the operator gave (dead list has
// only --since), permanently; with the column, or without bounds, any
// selection is allowed.
func TestTimeBoundsUsable(t *testing.T) {
	t.Parallel()
	with, err := NewMapping("", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	without, err := NewMapping("events", map[string]string{ColUpdatedAt: ""}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var zero time.Time
	tests := []struct {
		m            Mapping
		since, until time.Time
		want         string // "" for no error
	}{
		{with, now, now, ""},
		{without, zero, zero, ""},
		{without, now, zero, "since selects rows by their updatedAt column"},
		{without, zero, now, "until selects rows by their updatedAt column"},
		{without, now, now, "since and until select rows by their updatedAt column"},
	}
	for _, tt := range tests {
		err := TimeBoundsUsable(tt.m, tt.since, tt.until)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("since %v until %v: %v, want nil", !tt.since.IsZero(), !tt.until.IsZero(), err)
		case tt.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.want)):
			t.Errorf("since %v until %v: %v, want %q…", !tt.since.IsZero(), !tt.until.IsZero(), err, tt.want)
		case tt.want != "" && !outbox.IsPermanent(err):
			t.Errorf("since %v until %v: %v is not permanent", !tt.since.IsZero(), !tt.until.IsZero(), err)
		}
	}
}
