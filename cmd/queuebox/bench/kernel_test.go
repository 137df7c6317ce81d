package bench

import (
	"runtime"
	"strings"
	"testing"
)

// TestDescribeKernel: the machine line names page-table isolation, a
// missing pcid flag and the huge pages in use from the kernel's own files.
func TestDescribeKernel(t *testing.T) {
	const noPCID = "processor\t: 0\nflags\t\t: fpu vme pse pti\n\nprocessor\t: 1\nflags\t\t: fpu vme pse pcid pti\n"
	const withPCID = "processor\t: 0\nflags\t\t: fpu pcid pti\n"
	const noPool = "MemTotal: 24000000 kB\nHugePages_Total:       0\nHugePages_Free:        0\nHugePages_Rsvd:        0\nHugepagesize:       2048 kB\n"
	// 110 reserved; a PostgreSQL holds 72: 8 faulted in (110 - 102 free)
	// and 64 promised to its mapping but not yet touched.
	const pool = "HugePages_Total:     110\nHugePages_Free:      102\nHugePages_Rsvd:       64\nHugePages_Surp:        0\nHugepagesize:       2048 kB\n"
	for _, c := range []struct {
		meltdown, cpuinfo, meminfo, want string
	}{
		{"Mitigation: PTI\n", noPCID, noPool, "meltdown: Mitigation: PTI, no pcid; huge pages: none reserved"},
		{"Not affected\n", withPCID, pool, "meltdown: Not affected; huge pages: 110 of 2048 kB reserved, 72 in use"},
		{"", "", "", ""},
		{"", withPCID, "MemTotal: 1 kB\n", ""},
		// Rsvd can exceed what is free only while the counts are read
		// mid-change: never more in use than reserved.
		{"", "", "HugePages_Total: 4\nHugePages_Free: 0\nHugePages_Rsvd: 3\nHugepagesize: 2048 kB\n", "huge pages: 4 of 2048 kB reserved, 4 in use"},
	} {
		got := describeKernel(c.meltdown, strings.NewReader(c.cpuinfo), strings.NewReader(c.meminfo))
		if got != c.want {
			t.Errorf("describeKernel(%q, …) = %q, want %q", c.meltdown, got, c.want)
		}
	}
	// The machine line's CPU model comes from the same reader.
	if got, ok := cpuInfo(strings.NewReader("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t: pcid\n"), "model name"); !ok || got != "AMD EPYC" {
		t.Errorf("cpuInfo model name = %q, %v; want AMD EPYC", got, ok)
	}
	if got, ok := cpuInfo(strings.NewReader(withPCID), "model name"); ok {
		t.Errorf("cpuInfo found a model name in %q: %q", withPCID, got)
	}
	if runtime.GOOS == "linux" && !strings.Contains(kernelFacts(), "huge pages: ") {
		t.Fatalf("kernelFacts on Linux did not read /proc/meminfo: %q", kernelFacts())
	}
}
