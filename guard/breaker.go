package guard

import (
	"sync"
	"sync/atomic"
	"time"
)

// breaker is the circuit breaker's state machine. While closed (the healthy
// path) a call costs an atomic load before it and one after it; a mutex
// guards only the transitions and the half-open probe. (github.com/sony/
// gobreaker takes a mutex twice per call: bench/peers' BenchmarkBreaker
// measures both, and the difference shows at a network store's full speed.)
type breaker struct {
	state     atomic.Uint32 // a State
	failures  atomic.Int64  // failures in a row while closed
	threshold int64
	coolDown  time.Duration
	name      string
	onChange  func(name string, from, to State)

	mu       sync.Mutex
	openedAt time.Time // when it last opened
	probing  bool      // a probe is in flight
}

// outcome is what a call said of the primary's health.
type outcome uint8

const (
	success  outcome = iota
	failure          // an error, or a timeout
	excluded         // says nothing: the caller went away, or the call could not be made
)

// allow reports whether a call may go to the primary, and whether it is the
// half-open probe (whose outcome decides the state).
func (b *breaker) allow() (ok, probe bool) {
	if State(b.state.Load()) == Closed {
		return true, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch State(b.state.Load()) {
	case Closed:
		return true, false
	case Open:
		if time.Since(b.openedAt) < b.coolDown {
			return false, false
		}
		b.set(HalfOpen)
	}
	if b.probing { // half-open: one probe at a time
		return false, false
	}
	b.probing = true
	return true, true
}

// done records the outcome of a call allow let through.
func (b *breaker) done(probe bool, o outcome) {
	if !probe {
		switch o {
		case success:
			if b.failures.Load() != 0 { // no write on the healthy path
				b.failures.Store(0)
			}
		case failure:
			if b.failures.Add(1) >= b.threshold {
				b.mu.Lock()
				if State(b.state.Load()) == Closed {
					b.open()
				}
				b.mu.Unlock()
			}
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
	switch o {
	case success:
		b.failures.Store(0)
		b.set(Closed)
	case failure:
		b.open()
	}
}

// open opens the breaker; b.mu is held.
func (b *breaker) open() {
	b.openedAt = time.Now()
	b.set(Open)
}

// set changes the state and tells the observer; b.mu is held.
func (b *breaker) set(to State) {
	from := State(b.state.Swap(uint32(to)))
	if from != to && b.onChange != nil {
		b.onChange(b.name, from, to)
	}
}
