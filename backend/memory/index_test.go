package memory

import (
	"math/rand/v2"
	"testing"
)

// The index against a map, under tags chosen to collide: few distinct low
// bits, so that long runs wrap around the slots, and removals shift slots
// back across the wrap. Every indexed ref is found from its tag's home
// before reaching an empty slot, and none removed is.
func TestIndexFindsWhatItHoldsAfterAnyRemovals(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, spread := range []uint32{1, 3, 16, 1 << 20} {
		var x index
		held := map[uint32]uint32{} // ref -> tag
		next := uint32(1)
		for step := range 10_000 {
			if len(held) == 0 || rng.IntN(3) != 0 {
				tag := rng.Uint32()&^0xffff | rng.Uint32N(spread)<<3 | rng.Uint32N(8)
				x.add(tag, next)
				held[next] = tag
				next++
			} else {
				for ref, tag := range held { // any one
					x.remove(tag, ref)
					delete(held, ref)
					break
				}
			}
			if step%97 != 0 {
				continue
			}
			if x.n != len(held) {
				t.Fatalf("spread %d, step %d: n %d, holding %d", spread, step, x.n, len(held))
			}
			for ref, tag := range held {
				if !x.reaches(tag, ref) {
					t.Fatalf("spread %d, step %d: ref %d (tag %#x) not found from its home", spread, step, ref, tag)
				}
			}
			if x.n*4 > len(x.slots)*3 {
				t.Fatalf("spread %d: %d refs in %d slots", spread, x.n, len(x.slots))
			}
		}
	}
}

// reaches reports whether a probe for tag from its home meets ref before an
// empty slot.
func (x *index) reaches(tag, ref uint32) bool {
	mask := uint32(len(x.slots) - 1)
	for i := tag & mask; x.slots[i].ref != 0; i = (i + 1) & mask {
		if x.slots[i].ref == ref {
			return x.slots[i].tag == tag
		}
	}
	return false
}
