package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress shows how far a long operation is, on stderr: the units done
// out of the total, the rate and the time left. On a terminal it draws a
// bar (progressbar); elsewhere (a pipe, a log file, CI) it writes a plain
// line every interval, and a last one at the end when it wrote any. It
// never writes to stdout, where the command's report goes.
type progress struct {
	what, unit string
	start      time.Time

	mu          sync.Mutex
	done, total int64 // total < 0: not known yet
	bar         *progressbar.ProgressBar
	w           io.Writer // plain lines; nil with a bar or when off
	wrote       bool
	stop        chan struct{}
	stopped     sync.WaitGroup
}

// newProgress starts the progress of what (e.g. "replay"), counted in unit
// ("rows"), on w; total < 0 when not known yet. With --no-progress it shows
// nothing.
func newProgress(g *globalFlags, w io.Writer, what, unit string, total int64) *progress {
	p := &progress{what: what, unit: unit, total: total, start: time.Now(), stop: make(chan struct{})}
	switch {
	case g.noProgress:
	case isTerminal(w):
		p.bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(what),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString(unit),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	default:
		p.w = w
		every := g.progressEvery
		if every <= 0 {
			every = time.Second
		}
		p.stopped.Add(1)
		go p.lines(every)
	}
	return p
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Set records done units out of total (< 0: not known).
func (p *progress) Set(done, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = done
	if p.bar != nil && total != p.total {
		p.bar.ChangeMax64(total)
	}
	p.total = total
	if p.bar != nil {
		_ = p.bar.Set64(done)
	}
}

// Clear takes the bar off the terminal, so that a line written next is
// not mixed with it; it is drawn again at the next Set.
func (p *progress) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		_ = p.bar.Clear()
	}
}

// Finish ends the progress: the bar is cleared; the plain lines end with
// one for the final count, when any was written.
func (p *progress) Finish() {
	close(p.stop)
	p.stopped.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		_ = p.bar.Finish()
	}
	if p.w != nil && p.wrote {
		fmt.Fprintln(p.w, p.line(time.Now()))
	}
}

func (p *progress) lines(every time.Duration) {
	defer p.stopped.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			p.mu.Lock()
			fmt.Fprintln(p.w, p.line(now))
			p.wrote = true
			p.mu.Unlock()
		}
	}
}

// line is one plain progress line, such as
// "replay: 12000/200000 rows (6%), 2400 rows/s, 1m18s left".
func (p *progress) line(now time.Time) string {
	elapsed := now.Sub(p.start)
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(p.done) / s
	}
	if p.total < 0 {
		return fmt.Sprintf("%s: %d %s, %.0f %s/s, %s elapsed", p.what, p.done, p.unit, rate, p.unit, elapsed.Round(time.Second))
	}
	pct := 100.0
	if p.total > 0 {
		pct = 100 * float64(p.done) / float64(p.total)
	}
	left := "time left unknown"
	if rate > 0 {
		left = time.Duration(float64(p.total-p.done)/rate*float64(time.Second)).Round(time.Second).String() + " left"
	}
	if p.done >= p.total {
		left = "done in " + elapsed.Round(100*time.Millisecond).String()
	}
	return fmt.Sprintf("%s: %d/%d %s (%.0f%%), %.0f %s/s, %s", p.what, p.done, p.total, p.unit, pct, rate, p.unit, left)
}
