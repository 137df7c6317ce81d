package bench

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// stealWarnPercent is the CPU steal above which a drain's figures are
// flagged: on a virtual machine the hypervisor ran something else for that
// share of the CPUs' time, and a ratio against a drain that saw a
// different share compares two machines.
const stealWarnPercent = 10

// hostMeter measures what one drain cost the machine, the same way for the
// bare loop and the relay: the local database's CPU time, the CPU steal and
// the CPU time of every process on the machine.
type hostMeter struct {
	db       time.Duration
	dbFaults uint64
	faults   uint64
	cpu      cpuTimes
}

func startHostMeter() hostMeter {
	db, dbFaults := databaseUsage()
	return hostMeter{db: db, dbFaults: dbFaults, faults: readPageFaults(), cpu: readCPUTimes()}
}

// hostCost is what a drain cost the machine (hostMeter).
type hostCost struct {
	db time.Duration // the local database's processes
	// host is the CPU time every process of the machine spent running
	// (user, system, interrupts; not idle, I/O wait or steal): the
	// database, the broker, the relay or bare loop, the bench itself.
	host time.Duration
	// steal and busy are shares of the machine's CPU time (all CPUs): taken
	// by the hypervisor, and spent running (host). busy near 100 means the
	// drain had no CPU to spare: its rate is then its CPU time per row.
	steal, busy float64
	// switches is the machine's context switches (/proc/stat's ctxt): every
	// process that slept and was woken, every preemption. On a kernel with
	// page-table isolation and no PCID each one flushes the TLB, which
	// makes them one suspect when a row costs more CPU on one machine than
	// on another (docs/benchmarks.md, "Machine").
	switches uint64
	// faults is the machine's page faults (/proc/vmstat's pgfault) and
	// dbFaults the minor faults of the database's processes. A backend
	// maps each page of the shared buffers on its first touch, one fault
	// per 4 kB page unless they are on huge pages, and on a kernel with
	// page-table isolation each fault is dear.
	faults, dbFaults uint64
}

// stop returns what the machine spent since the start.
func (m hostMeter) stop() hostCost {
	now := readCPUTimes()
	db, dbFaults := databaseUsage()
	c := hostCost{db: db - m.db, steal: stealPercent(m.cpu, now), busy: busyPercent(m.cpu, now)}
	if dbFaults > m.dbFaults {
		c.dbFaults = dbFaults - m.dbFaults
	}
	if f := readPageFaults(); f > m.faults {
		c.faults = f - m.faults
	}
	if now.total > m.cpu.total {
		c.host = time.Duration(float64(now.busy()-m.cpu.busy()) / clockTicks * float64(time.Second))
	}
	if now.switches > m.cpu.switches {
		c.switches = now.switches - m.cpu.switches
	}
	return c
}

// readPageFaults is /proc/vmstat's pgfault: the page faults of every
// process since boot; 0 where there is none.
func readPageFaults() uint64 {
	f, err := os.Open("/proc/vmstat")
	if err != nil {
		return 0
	}
	defer f.Close()
	return parseVMStat(f, "pgfault")
}

// parseVMStat returns the counter name of a /proc/vmstat listing.
func parseVMStat(r io.Reader, name string) uint64 {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// cpuTimes is the machine-wide CPU time of /proc/stat's first line, in
// clock ticks: all of it, the part stolen by the hypervisor and the part
// idle (idle and iowait); and the context switches of its ctxt line.
type cpuTimes struct{ total, steal, idle, switches uint64 }

// busy is the CPU time spent running something.
func (t cpuTimes) busy() uint64 { return t.total - t.steal - t.idle }

// readCPUTimes reads /proc/stat; the zero value where there is none.
func readCPUTimes() cpuTimes {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	defer f.Close()
	return parseProcStat(f)
}

// parseProcStat reads the contents of /proc/stat: the CPU times of its
// first line and the count of its ctxt line.
func parseProcStat(r io.Reader) cpuTimes {
	sc := bufio.NewScanner(r)
	if !sc.Scan() {
		return cpuTimes{}
	}
	t := parseCPUTimes(sc.Text())
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "ctxt "); ok {
			t.switches, _ = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			break
		}
	}
	return t
}

// parseCPUTimes parses the "cpu" line of /proc/stat: user nice system idle
// iowait irq softirq steal [guest guest_nice]. Guest time is already
// counted in user and nice, so the total stops at steal.
func parseCPUTimes(line string) cpuTimes {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}
	}
	var t cpuTimes
	for i, s := range f[1:9] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return cpuTimes{}
		}
		t.total += v
		switch i {
		case 3, 4: // idle, iowait
			t.idle += v
		case 7:
			t.steal = v
		}
	}
	return t
}

// stealPercent is the share of the CPUs' time stolen between a and b.
func stealPercent(a, b cpuTimes) float64 {
	if b.total <= a.total {
		return 0
	}
	return float64(b.steal-a.steal) / float64(b.total-a.total) * 100
}

// busyPercent is the share of the CPUs' time spent running between a and
// b: 100 when every CPU ran something all the time.
func busyPercent(a, b cpuTimes) float64 {
	if b.total <= a.total {
		return 0
	}
	return float64(b.busy()-a.busy()) / float64(b.total-a.total) * 100
}
