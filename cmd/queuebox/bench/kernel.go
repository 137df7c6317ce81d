package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// kernelFacts describes what makes a CPU second dearer on this machine
// for the relay than for the bare loop (docs/benchmarks.md, "Machine"):
// page-table isolation without the pcid
// flag flushes the TLB at every system call and context switch, and a
// PostgreSQL whose shared memory is not on huge pages then pays for it
// in page faults and TLB misses in every backend. Empty off Linux.
func kernelFacts() string {
	meltdown, _ := os.ReadFile("/sys/devices/system/cpu/vulnerabilities/meltdown")
	cpuinfo, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer cpuinfo.Close()
	meminfo, err := os.Open("/proc/meminfo")
	if err != nil {
		return ""
	}
	defer meminfo.Close()
	return describeKernel(string(meltdown), cpuinfo, meminfo)
}

// describeKernel renders the contents of the meltdown vulnerability file,
// /proc/cpuinfo and /proc/meminfo as one phrase, for example
// "meltdown: Mitigation: PTI, no pcid; huge pages: none reserved".
func describeKernel(meltdown string, cpuinfo, meminfo io.Reader) string {
	var parts []string
	if m := strings.TrimSpace(meltdown); m != "" {
		parts = append(parts, "meltdown: "+m)
	}
	if hasPCID, ok := cpuFlag(cpuinfo, "pcid"); ok && !hasPCID {
		parts = append(parts, "no pcid")
	}
	desc := strings.Join(parts, ", ")
	if hp := hugePages(meminfo); hp != "" {
		if desc != "" {
			desc += "; "
		}
		desc += "huge pages: " + hp
	}
	return desc
}

// cpuFlag reports whether the first processor's flags line in cpuinfo
// lists flag; ok is false when there is no flags line.
func cpuFlag(cpuinfo io.Reader, flag string) (has, ok bool) {
	flags, ok := cpuInfo(cpuinfo, "flags")
	return ok && slices.Contains(strings.Fields(flags), flag), ok
}

// cpuInfo returns the value of the first line of /proc/cpuinfo's contents
// whose key is key (the first processor's), trimmed; ok is false when no
// line has it.
func cpuInfo(cpuinfo io.Reader, key string) (string, bool) {
	sc := bufio.NewScanner(cpuinfo)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		if k, v, found := strings.Cut(sc.Text(), ":"); found && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// hugePages summarises the HugePages lines of /proc/meminfo: how many
// are reserved in the kernel's pool and how many of those are in use or
// promised to a mapping (a PostgreSQL on this machine that got its
// shared memory on huge pages holds them from its start). Empty when the
// kernel reports no pool.
func hugePages(meminfo io.Reader) string {
	vals := map[string]uint64{}
	sc := bufio.NewScanner(meminfo)
	for sc.Scan() {
		k, v, found := strings.Cut(sc.Text(), ":")
		if !found || !strings.HasPrefix(k, "HugePages_") && k != "Hugepagesize" {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		vals[k] = n
	}
	total, ok := vals["HugePages_Total"]
	if !ok {
		return ""
	}
	if total == 0 {
		return "none reserved"
	}
	used := total - min(vals["HugePages_Free"], total) + vals["HugePages_Rsvd"]
	return fmt.Sprintf("%d of %d kB reserved, %d in use", total, vals["Hugepagesize"], min(used, total))
}
