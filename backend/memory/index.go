package memory

// index finds a table's records by hash: open addressing over a power of two
// of slots, probed linearly. A slot holds 32 bits of the hash (its tag) and
// the record's reference, so that a probe reads the record only when the
// tags match; a slot's home is its tag's low bits, so that the index grows,
// and deletes by shifting back the slots after (no tombstones), from the
// tags alone. The shard is picked by the hash's other half (see Store.hash).
//
// It replaces a Go map keyed by the hash: that map's own hash of the key,
// its groups of 16-byte slots and its pointer to a separate entry cost more
// time per lookup and more bytes per key (docs/figures.md measures both).
type index struct {
	slots []slot
	n     int
}

// slot is a tag and a record's reference; ref 0 is an empty slot.
type slot struct{ tag, ref uint32 }

// tagOf is the tag of hash h: its upper half (the shard is its lower bits).
func tagOf(h uint64) uint32 { return uint32(h >> 32) }

// minSlots is the slots of an index's first allocation.
const minSlots = 8

// add indexes ref under tag; the caller checked that it is not indexed.
func (x *index) add(tag, ref uint32) {
	if (x.n+1)*4 > len(x.slots)*3 { // at most 3/4 full: short probes
		x.grow()
	}
	x.place(slot{tag, ref})
	x.n++
}

// place puts s in the first empty slot from its home.
func (x *index) place(s slot) {
	mask := uint32(len(x.slots) - 1)
	i := s.tag & mask
	for x.slots[i].ref != 0 {
		i = (i + 1) & mask
	}
	x.slots[i] = s
}

func (x *index) grow() {
	old := x.slots
	x.slots = make([]slot, max(minSlots, 2*len(old)))
	for _, s := range old {
		if s.ref != 0 {
			x.place(s)
		}
	}
}

// remove drops ref, indexed under tag: the slots after it that would no
// longer be found from their homes move back into the gap.
func (x *index) remove(tag, ref uint32) {
	mask := uint32(len(x.slots) - 1)
	i := tag & mask
	for x.slots[i].ref != ref {
		if x.slots[i].ref == 0 { // not indexed: nothing to drop (no broken table spins under its lock)
			return
		}
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; x.slots[j].ref != 0; j = (j + 1) & mask {
		home := x.slots[j].tag & mask
		// The slot at j stays when its home is cyclically in (i, j].
		if (i < j && i < home && home <= j) || (i > j && (i < home || home <= j)) {
			continue
		}
		x.slots[i], i = x.slots[j], j
	}
	x.slots[i] = slot{}
	x.n--
}
