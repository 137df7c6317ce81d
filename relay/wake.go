package relay

import "context"

// signalChanged tells the claimer that rows were settled.
func (e *Engine) signalChanged() {
	select {
	case e.changed <- struct{}{}:
	default:
	}
}

func (e *Engine) forwardWake(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-e.opt.Wake:
			if !ok {
				return
			}
			e.wakeAll()
		}
	}
}

// wakeAll wakes the claimer if it waits for its next poll.
func (e *Engine) wakeAll() {
	e.wakeMu.Lock()
	close(e.wakeCh)
	e.wakeCh = make(chan struct{})
	e.wakeMu.Unlock()
}

func (e *Engine) wakeChan() <-chan struct{} {
	e.wakeMu.Lock()
	defer e.wakeMu.Unlock()
	return e.wakeCh
}
