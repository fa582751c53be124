package memory

import "time"

func (s *Store) sweeper() {
	defer s.swept.Done()
	tick := time.NewTicker(s.sweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			s.Sweep()
		}
	}
}

// Sweep drops every key whose windows have all passed, and reports how many
// it dropped. The sweeper calls it; call it yourself with the sweeper off.
// A store clock (WithStoreClock) that panics makes it drop nothing: the
// panic is recovered, as a decision's is (in the sweeper's goroutine it
// would end the process).
func (s *Store) Sweep() (dropped int) {
	defer func() {
		if recover() != nil {
			dropped = 0
		}
	}()
	now := s.micros()
	for i := range s.shards {
		dropped += s.shards[i].sweep(now)
	}
	return dropped
}
