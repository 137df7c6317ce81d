package bench

import (
	"math"
	"strings"
	"testing"
)

func TestStealPercent(t *testing.T) {
	a := parseCPUTimes("cpu  177938 0 49634 600663 2436 0 5709 5705 0 0")
	b := parseCPUTimes("cpu  178938 0 50634 601163 2436 0 5709 6205 300 0")
	// +1000 user, +1000 system, +500 idle, +500 steal; guest (300) is
	// inside user already and must not count twice.
	if got, want := stealPercent(a, b), 500.0/3000*100; math.Abs(got-want) > 1e-9 {
		t.Fatalf("steal %.4f%%, want %.4f%%", got, want)
	}
	if got := stealPercent(b, a); got != 0 {
		t.Fatalf("steal over a backwards interval: %.2f%%, want 0", got)
	}
	// Busy: user and system, 2000 of 3000 ticks; idle and steal are not.
	if got, want := busyPercent(a, b), 2000.0/3000*100; math.Abs(got-want) > 1e-9 {
		t.Fatalf("busy %.4f%%, want %.4f%%", got, want)
	}
	if got := busyPercent(b, a); got != 0 {
		t.Fatalf("busy over a backwards interval: %.2f%%, want 0", got)
	}
	// iowait (the fifth figure) is idle time too.
	c := parseCPUTimes("cpu  178938 0 50634 601163 3436 0 5709 6205 300 0")
	if got, want := busyPercent(b, c), 0.0; got != want {
		t.Fatalf("busy over an interval of iowait only: %.2f%%, want 0", got)
	}
	for _, bad := range []string{"", "intr 1 2 3", "cpu 1 2 3", "cpu 1 2 3 4 5 6 7 x"} {
		if got := parseCPUTimes(bad); got != (cpuTimes{}) {
			t.Fatalf("parseCPUTimes(%q) = %+v, want zero", bad, got)
		}
	}
	got := readCPUTimes()
	if got.total == 0 || got.switches == 0 {
		t.Fatalf("readCPUTimes on Linux read nothing: %+v", got)
	}
	// The context switches come from the ctxt line, wherever it is.
	stat := parseProcStat(strings.NewReader("cpu  177938 0 49634 600663 2436 0 5709 5705 0 0\n" +
		"cpu0 88969 0 24817 300331 1218 0 2854 2852 0 0\nintr 9 8 7\nctxt 123456789\nbtime 1\n"))
	if stat.total != a.total || stat.switches != 123456789 {
		t.Fatalf("parseProcStat: %+v, want the times of %+v and 123456789 switches", stat, a)
	}
	if s := parseProcStat(strings.NewReader("cpu  1 0 1 1 0 0 0 0 0 0\n")); s.switches != 0 || s.total != 3 {
		t.Fatalf("parseProcStat without a ctxt line: %+v", s)
	}
}

func TestParseVMStat(t *testing.T) {
	const vmstat = "pgpgin 4410\npgfault_extra 7\npgfault 123456789\npgmajfault 321\n"
	if got := parseVMStat(strings.NewReader(vmstat), "pgfault"); got != 123456789 {
		t.Fatalf("pgfault %d, want 123456789 (not the pgfault_extra line)", got)
	}
	if got := parseVMStat(strings.NewReader(vmstat), "pgmajfault"); got != 321 {
		t.Fatalf("pgmajfault %d, want 321", got)
	}
	if got := parseVMStat(strings.NewReader(vmstat), "nr_free_pages"); got != 0 {
		t.Fatalf("a counter that is not there: %d, want 0", got)
	}
}
