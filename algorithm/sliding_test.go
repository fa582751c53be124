package algorithm

import "testing"

// BenchmarkLogAtItsBuffersSize is a log whose window holds as many entries
// as its buffer, each admission pruning one: a steady caller at its limit
// of 64 (a power of two, the size append grows a buffer to). A buffer
// compacted whenever it was full copied the window's 63 other entries on
// every admission.
func BenchmarkLogAtItsBuffersSize(b *testing.B) {
	const limit, window = 64, 64_000 // µs: an entry a ms
	r := NewRate(limit, window, 0)
	var l Log
	var out Outcome
	now := int64(1)
	for range limit { // the window full, the buffer at its size
		l.TakeTo(now, &r, 1, &out)
		now += window / limit
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l.TakeTo(now, &r, 1, &out)
		if out.RetryAfter != 0 {
			b.Fatal("denied at a steady rate within the limit")
		}
		now += window / limit
	}
}

// A steady caller at a limit of 64, each admission pruning one entry, has
// its buffer compacted now and then, not on every admission: a full
// buffer was compacted whenever anything was pruned, copying the window's
// 63 other entries each time.
func TestALogAtItsBuffersSizeIsNotCopiedOnEveryAdmission(t *testing.T) {
	const limit, window, admissions = 64, 64_000, 1000
	r := NewRate(limit, window, 0)
	var l Log
	var out Outcome
	now := int64(1)
	compactions := 0
	for i := range limit + admissions {
		first := int64(0) // the buffer's first slot: it changes when the entries are moved
		if len(l.buf) > 0 {
			first = l.buf[0]
		}
		l.TakeTo(now, &r, 1, &out)
		if out.RetryAfter != 0 {
			t.Fatalf("admission %d denied at a steady rate within the limit", i)
		}
		if i >= limit && l.buf[0] != first {
			compactions++
		}
		now += window / limit
	}
	if compactions > admissions/10 {
		t.Fatalf("%d compactions in %d admissions", compactions, admissions)
	}
}

// entries is what l holds, oldest first.
func (l *Log) entries() []Entry {
	var es []Entry
	e := l.buf[l.head:]
	for i := 0; i < len(e); {
		var x Entry
		x, i = entryAt(e, i)
		es = append(es, x)
	}
	return es
}
