package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes r as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes r as readable tables: the run and the machine, then a
// table for each kind of case that ran, then notes and failures.
func (r *Report) WriteTable(w io.Writer) error {
	r.writeHeading(w)
	for _, table := range []func(io.Writer) error{r.writeDrains, r.writeLatency, r.writeIsolation} {
		if err := table(w); err != nil {
			return err
		}
	}
	writeList(w, "notes", r.notes())
	writeList(w, "failures", r.failures())
	return nil
}

func (r *Report) writeHeading(w io.Writer) {
	m := r.Machine
	traced := ""
	if r.Traced {
		traced = "; every row traced (OTLP/HTTP to a receiver that discards the spans)"
	}
	fmt.Fprintf(w, "queuebox bench — %d rows, %d keys (keyed cases), payload %d B, batch %d, %d round(s) per case (medians)%s\n", r.Rows, r.Keys, r.Payload, r.BatchSize, r.Runs, traced)
	cpu := m.CPU
	if m.Kernel != "" {
		cpu += "; " + m.Kernel
	}
	fmt.Fprintf(w, "machine: %d CPUs (%s), %s, %s, PostgreSQL %s, NATS %s; elapsed %s\n\n", m.CPUs, cpu, m.GOOS, m.Go, m.PostgreSQL, m.NATS, r.Elapsed)
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
}

// writeDrains writes a row for each relay run of each drain, the case and
// its bare loop on the first.
func (r *Report) writeDrains(w io.Writer) error {
	if len(r.Drains) == 0 {
		return nil
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "case\tbare rows/s\tbare DB CPU s/10k\treplicas\trelay rows/s\trelay ÷ bare\t(min–max)\tCPU s/10k rows\tDB CPU s/10k\thost CPU s/10k bare/relay\thost busy % bare/relay\tsteal % bare/relay\tcontext switches/row bare/relay\tpeak RSS MiB\tidle q/s/replica\tidle CPU %/replica\t")
	for _, d := range r.Drains {
		bare, bareDB := fmt.Sprintf("%.0f", d.Bare), fmt.Sprintf("%.2f", d.BareDB)
		if d.BareErr != "" {
			bare, bareDB = "FAILED", ""
		}
		for i, rr := range d.Relay {
			name, b, bdb := d.Case, bare, bareDB
			if i > 0 {
				name, b, bdb = "", "", ""
			}
			if rr.Error != "" {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\tFAILED\t\t\t\t\t\t\t\t\t\t\t\t\n", name, b, bdb, rr.Replicas)
				continue
			}
			spread := ""
			if d.Runs > 1 {
				spread = fmt.Sprintf("%.2f–%.2f", rr.RatioMin, rr.RatioMax)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.0f\t%.2f\t%s\t%.2f\t%.2f\t%.2f/%.2f\t%.0f/%.0f\t%.0f/%.0f\t%.1f/%.1f\t%.1f\t%.1f\t%.2f\t\n",
				name, b, bdb, rr.Replicas, rr.RowsPerSec, rr.Ratio, spread, rr.CPUPer10k, rr.DBCPUPer10k, d.BareHostCPU, rr.HostCPUPer10k, d.BareBusy, rr.HostBusyPct, d.BareSteal, rr.StealPct, d.BareSwitches, rr.SwitchesPerRow, rr.PeakRSSMiB, rr.IdleQPS, rr.IdleCPU)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return nil
}

// writeLatency writes a row for each latency run: polling, wake on commit.
func (r *Report) writeLatency(w io.Writer) error {
	if len(r.Latency) == 0 {
		return nil
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "commit-to-ack\toffered rows/s\twritten rows/s\trows\tp50 ms\tp95 ms\tp99 ms\tmax ms\tnotifying commits %\tidle q/s\tidle CPU %\t")
	for _, l := range r.Latency {
		mode := "polling"
		if l.Wake {
			mode = "wake on commit"
		}
		if l.Error != "" {
			fmt.Fprintf(tw, "%s\t%d\tFAILED\t\t\t\t\t\t\t\t\t\n", mode, l.Offered)
			continue
		}
		notifying := "–"
		if l.Wake && l.Rows > 0 {
			notifying = fmt.Sprintf("%.1f", 100*float64(l.Notifications)/float64(l.Rows))
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t%.1f\t%.2f\t\n", mode, l.Offered, l.Achieved, l.Rows, l.P50, l.P95, l.P99, l.Max, notifying, l.IdleQPS, l.IdleCPU)
	}
	return tw.Flush()
}

// writeIsolation writes a row for each isolation case, beside its
// baseline without the slow keys.
func (r *Report) writeIsolation(w io.Writer) error {
	if len(r.Isolation) == 0 {
		return nil
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "isolation\trows\tkeys\tslow receiver ms\trows/s\twithout slow keys rows/s\tratio\ttarget rows/s\t")
	for _, is := range r.Isolation {
		if is.Error != "" {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\tFAILED\t\t\t\t\n", is.Case, is.Rows, is.Keys, is.Latency)
			continue
		}
		base, ratio, target := "–", "–", "–"
		if is.Baseline > 0 {
			base, ratio = fmt.Sprintf("%.0f", is.Baseline), fmt.Sprintf("%.2f", is.Ratio)
		}
		if is.Target > 0 {
			target = fmt.Sprintf("%.0f", is.Target)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.0f\t%s\t%s\t%s\t\n", is.Case, is.Rows, is.Keys, is.Latency, is.RowsPerSec, base, ratio, target)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return nil
}

// notes are the drains' warnings, each after its case.
func (r *Report) notes() []string {
	var notes []string
	for _, d := range r.Drains {
		for _, n := range d.Warnings {
			notes = append(notes, d.Case+" "+n)
		}
	}
	return notes
}

// failures names every run that failed, with its error.
func (r *Report) failures() []string {
	var errs []string
	for _, is := range r.Isolation {
		if is.Error != "" {
			errs = append(errs, is.Case+": "+is.Error)
		}
	}
	for _, d := range r.Drains {
		if d.BareErr != "" {
			errs = append(errs, d.Case+" bare: "+d.BareErr)
		}
		for _, rr := range d.Relay {
			if rr.Error != "" {
				errs = append(errs, fmt.Sprintf("%s relay ×%d: %s", d.Case, rr.Replicas, rr.Error))
			}
		}
	}
	for _, l := range r.Latency {
		if l.Error != "" {
			errs = append(errs, fmt.Sprintf("latency (wake %v): %s", l.Wake, l.Error))
		}
	}
	return errs
}

// writeList writes items under title, one a line; nothing when there are
// none.
func writeList(w io.Writer, title string, items []string) {
	if len(items) > 0 {
		fmt.Fprintf(w, "\n%s:\n  %s\n", title, strings.Join(items, "\n  "))
	}
}
