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
func (s *Store) Sweep() int {
	now := s.micros()
	dropped := 0
	for i := range s.shards {
		dropped += s.shards[i].sweep(now)
	}
	return dropped
}
