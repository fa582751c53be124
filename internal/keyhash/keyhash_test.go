package keyhash

import (
	"fmt"
	"hash/maphash"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every byte of a key, at every length the hash reads differently, moves
// its hash.
func TestReadsEveryByte(t *testing.T) {
	sd := NewSeed()
	for n := 0; n <= 70; n++ {
		key := []byte(strings.Repeat("k", n))
		h := String(sd, string(key))
		if n > 0 {
			require.NotEqual(t, h, String(sd, string(key[:n-1])), "length %d against %d", n, n-1)
		}
		for i := range key {
			key[i] = 'j'
			require.NotEqual(t, h, String(sd, string(key)), "length %d, byte %d", n, i)
			key[i] = 'k'
		}
	}
}

// The seed keys the hash: two stores file the same key apart.
func TestDependsOnTheSeed(t *testing.T) {
	a, b := NewSeed(), NewSeed()
	for _, key := range []string{"", "a", "abcd", "10.0.0.1", "user-1234567890", strings.Repeat("x", 40)} {
		require.NotEqual(t, String(a, key), String(b, key), "%q", key)
	}
}

// Keys alike but for a counter, the usual case (ids, addresses), spread
// evenly over both halves of the hash: the memory store picks a shard by
// the low bits, and files the key in the shard's index by the upper half.
func TestSpreadsSimilarKeys(t *testing.T) {
	sd := NewSeed()
	const keys, buckets = 64_000, 64
	for _, format := range []string{"%d", "user-%d", "10.0.%d.%d", "tenant-0000000000-key-%08d"} {
		var low, high [buckets]int
		for i := range keys {
			var key string
			if strings.Count(format, "%") == 2 {
				key = fmt.Sprintf(format, i/256, i%256)
			} else {
				key = fmt.Sprintf(format, i)
			}
			h := String(sd, key)
			low[h%buckets]++
			high[(h>>32)%buckets]++
		}
		// Chi-squared over 63 degrees of freedom: above 120 has a chance
		// under 1 in 100,000 for a uniform hash.
		require.Less(t, chiSquared(low[:], keys), 120.0, "%s: low bits", format)
		require.Less(t, chiSquared(high[:], keys), 120.0, "%s: tag bits", format)
	}
}

func chiSquared(counts []int, total int) float64 {
	want := float64(total) / float64(len(counts))
	x := 0.0
	for _, c := range counts {
		d := float64(c) - want
		x += d * d / want
	}
	return x
}

var hashSink uint64

// BenchmarkString is the store's hash of a key against hash/maphash's,
// each hash feeding the next key's pick (a chain, as a decision waits on
// its hash).
func BenchmarkString(b *testing.B) {
	keys := []string{"user-1", "user-12", "user-123", "10.0.0.1", "user-1234567890", "tenant-0000000000-key-00000001"}
	b.Run("keyhash", func(b *testing.B) {
		sd, h := NewSeed(), uint64(0)
		for i := 0; i < b.N; i++ {
			h += String(sd, keys[(uint64(i)+h&1)%uint64(len(keys))])
		}
		hashSink = h
	})
	b.Run("maphash", func(b *testing.B) {
		sd, h := maphash.MakeSeed(), uint64(0)
		for i := 0; i < b.N; i++ {
			h += maphash.String(sd, keys[(uint64(i)+h&1)%uint64(len(keys))])
		}
		hashSink = h
	})
}
