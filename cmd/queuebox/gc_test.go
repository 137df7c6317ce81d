package main

import (
	"runtime/debug"
	"testing"
)

// TestSetGCPercent: without GOGC in the environment the relay runs the
// collector at defaultGCPercent; with GOGC set, the runtime's reading of
// it stands.
func TestSetGCPercent(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	unset := func(string) (string, bool) { return "", false }
	if got := setGCPercent(unset); got != "400" {
		t.Fatalf("GOGC unset: reported %q, want 400", got)
	}
	if got := debug.SetGCPercent(100); got != defaultGCPercent {
		t.Fatalf("GOGC unset: collector at %d, want %d", got, defaultGCPercent)
	}

	set := func(k string) (string, bool) { return map[string]string{"GOGC": "50"}[k], k == "GOGC" }
	if got := setGCPercent(set); got != "50" {
		t.Fatalf("GOGC=50: reported %q", got)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC=50: the relay changed the collector to %d; the environment's value must stand", got)
	}
}
