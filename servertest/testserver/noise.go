package testserver

import (
	"sync/atomic"
	"time"
)

// Noise measures how late this process's 1ms timers fire while it runs:
// the scheduling noise of the machine, which any latency bound allows for.
type Noise struct {
	worst atomic.Int64
	quit  chan struct{}
	ended chan struct{}
}

// StartNoise starts measuring the scheduling noise, until Stop.
func StartNoise() *Noise {
	n := &Noise{quit: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(n.ended)
		for {
			began := time.Now()
			select {
			case <-n.quit:
				return
			case <-time.After(time.Millisecond):
			}
			if late := int64(time.Since(began) - time.Millisecond); late > n.worst.Load() {
				n.worst.Store(late)
			}
		}
	}()
	return n
}

// Stop ends the measurement and returns the worst lateness seen.
func (n *Noise) Stop() time.Duration {
	close(n.quit)
	<-n.ended
	return time.Duration(n.worst.Load())
}
