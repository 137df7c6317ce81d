package bench

import (
	"bufio"
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
// bare loop and the relay: the local database's CPU time and the CPU steal.
type hostMeter struct {
	db  time.Duration
	cpu cpuTimes
}

func startHostMeter() hostMeter { return hostMeter{db: databaseCPU(), cpu: readCPUTimes()} }

// stop returns the database's CPU time and the steal (%) since the start.
func (m hostMeter) stop() (db time.Duration, steal float64) {
	return databaseCPU() - m.db, stealPercent(m.cpu, readCPUTimes())
}

// cpuTimes is the machine-wide CPU time of /proc/stat's first line, in
// clock ticks: all of it, and the part stolen by the hypervisor.
type cpuTimes struct{ total, steal uint64 }

// readCPUTimes reads /proc/stat; the zero value where there is none.
func readCPUTimes() cpuTimes {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return cpuTimes{}
	}
	return parseCPUTimes(sc.Text())
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
		if i == 7 {
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
