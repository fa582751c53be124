package memory

import "fmt"

// How a full shard makes room for a new key, sheds logs past its bound of
// entries, and drops what has expired.

// class is a kind of key that may make room for a new one, in the order the
// shard looks for them.
type class uint8

const (
	idleProbation class = iota // on probation, its windows all passed
	idleProtected              // the oldest protected, its windows all passed
	onProbation                // the oldest on probation
	sweep                      // the CLOCK's pick of the protected keys
)

// makeRoom makes room for a new key when the shard is full: an idle key at
// the end of a list goes first, then the oldest key on probation, and only
// when none is on probation a protected key, by the sweep: from the oldest,
// a key used since the sweep last passed it goes to the front with its bit
// cleared, and the first one not used is evicted. A key used since the
// sweep last passed is never evicted before one that was not; a key used
// once, however recently, goes before any key used twice. A key in active
// use is therefore never evicted for new keys while the shard holds keys
// used once. The tables are looked at in one order; the sweep runs on the
// table holding the most keys. An evicted key still inside its window is
// counted; when the store refuses new keys, the new key is refused instead.
func (sh *shard) makeRoom(now int64) error {
	tables := sh.tables()
	if sh.keyCount() < sh.capacity {
		return nil
	}
	most := 0
	for _, t := range tables {
		most = max(most, t.len())
	}
	for c := idleProbation; c <= sweep; c++ {
		for _, t := range tables {
			if c == sweep && t.len() < most {
				continue
			}
			ref := t.victim(now, c)
			if ref == 0 {
				continue
			}
			if c > idleProtected {
				if sh.refuse {
					sh.stats.refused.Add(1)
					return fmt.Errorf("%w (%d keys in this shard)", ErrFull, sh.capacity)
				}
				sh.stats.activeEvictions.Add(1)
			}
			sh.remove(t, ref)
			return nil
		}
	}
	return nil
}

// shed evicts the least recently used logs, never keep, until the shard's
// log entries are within its bound.
func (sh *shard) shed(keep uint32, now int64) {
	sh.log.oldest(func(ref uint32, expireAt int64) bool {
		if ref != keep {
			if expireAt > now {
				sh.stats.activeEvictions.Add(1)
			}
			sh.remove(&sh.log, ref)
		}
		return sh.entries > sh.maxEntries
	})
}

// remove drops ref from t.
func (sh *shard) remove(t keys, ref uint32) {
	sh.entries -= t.drop(ref)
}

// sweep drops the shard's keys whose windows have all passed at now.
func (sh *shard) sweep(now int64) int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	dropped := 0
	for _, t := range sh.tables() {
		t.oldest(func(ref uint32, expireAt int64) bool {
			if expireAt <= now {
				sh.remove(t, ref)
				dropped++
			}
			return true
		})
	}
	return dropped
}
