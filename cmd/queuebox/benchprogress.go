package main

import (
	"bytes"
	"io"
	"strings"
	"sync"

	"github.com/queuebox/queuebox/cmd/queuebox/bench"
)

// benchSteps is how many steps a bench run of o announces with a line
// starting "== ": one per round of each drain case, two for the latency
// case (without and with wake on commit), one per isolation case.
func benchSteps(o bench.Options) int64 {
	want := func(name string) bool {
		if len(o.Cases) == 0 {
			return true
		}
		for _, c := range o.Cases {
			if c == name || strings.HasPrefix(name, c+"-") {
				return true
			}
		}
		return false
	}
	var n int64
	for _, c := range bench.AllCases {
		switch {
		case !want(c):
		case c == "latency":
			n += 2
		case c == "webhook" || c == "skewed":
			n++
		default:
			n += int64(max(o.Runs, 1))
		}
	}
	return n
}

// benchProgress passes the bench's own lines through to w and counts its
// steps into a progress: each line starting "== " is one, and a drain case
// skipped (its destination does not answer) takes its rounds off the total.
type benchProgress struct {
	w    io.Writer
	p    *progress
	runs int64

	mu          sync.Mutex
	done, total int64
	partial     []byte
}

func newBenchProgress(g *globalFlags, w io.Writer, o bench.Options) *benchProgress {
	total := benchSteps(o)
	return &benchProgress{w: w, p: newProgress(g, w, "bench", "steps", total), runs: int64(max(o.Runs, 1)), total: total}
}

func (b *benchProgress) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.p.Clear()
	n, err := b.w.Write(p)
	b.partial = append(b.partial, p[:n]...)
	for {
		i := bytes.IndexByte(b.partial, '\n')
		if i < 0 {
			break
		}
		line := string(b.partial[:i])
		b.partial = b.partial[i+1:]
		switch {
		case !strings.HasPrefix(line, "== "):
		case strings.Contains(line, " skipped: "):
			b.total -= b.runs
		default:
			b.done++
		}
		b.p.Set(min(b.done, b.total), max(b.total, b.done))
	}
	return n, err
}

// Finish ends the progress.
func (b *benchProgress) Finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.p.Set(b.done, b.done)
	b.p.Finish()
}
