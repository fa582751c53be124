// Package keyhash is the memory store's hash of a key (and the bench's
// floors that stand for the store's path): wyhash's multiply-fold over the
// key's bytes, keyed by a random seed.
package keyhash

import (
	"math/bits"
	"math/rand/v2"
)

// Seed keys the hash: random (NewSeed), so that no client can choose keys
// that collide in another process's index.
type Seed struct{ a, b uint64 }

// NewSeed is a random Seed.
func NewSeed() Seed { return Seed{rand.Uint64(), rand.Uint64()} }

// String is the hash of a key: wyhash's multiply-fold (the hash Go's
// runtime uses for strings on CPUs without AES) over the key's bytes,
// keyed by sd. A key of up to 16 bytes, the common one (an address, an
// id), is read in at most two loads, with no call. The store used
// hash/maphash.String before, which reaches the runtime's hash through two
// calls for every key: BenchmarkString measures this one at about 0.7x its
// time, and a memory decision runs 30 instructions for its hash against 67
// (callgrind), with the same defence against chosen collisions (a random
// seed).
func String(sd Seed, s string) uint64 {
	n := uint64(len(s))
	var a, b uint64
	switch {
	case n == 0:
	case n < 4: // the first, middle and last bytes
		a = uint64(s[0])<<16 | uint64(s[n>>1])<<8 | uint64(s[n-1])
	case n <= 8: // two 4-byte reads, overlapping when n < 8
		a, b = load32(s), load32(s[n-4:])
	case n <= 16: // two 8-byte reads, overlapping when n < 16
		a, b = load64(s), load64(s[n-8:])
	default:
		return hashLong(sd, s)
	}
	return mix(sd.b^n, mix(a^sd.b, b^sd.a))
}

// hashLong is String for a key of more than 16 bytes: 16 bytes a round,
// then the last 16.
func hashLong(sd Seed, s string) uint64 {
	h, n := sd.a, uint64(len(s))
	for rest := s; len(rest) > 16; rest = rest[16:] {
		h = mix(load64(rest)^sd.b, load64(rest[8:])^h)
	}
	// The key's last 16 bytes, overlapping what the rounds read.
	a, b := load64(s[n-16:]), load64(s[n-8:])
	return mix(sd.b^n, mix(a^sd.b, b^h))
}

// mix is wyhash's multiply-fold: the 128-bit product's halves, xored.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// load64 is s's first 8 bytes, little endian: one load once compiled (the
// compiler merges the byte loads).
func load64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// load32 is s's first 4 bytes, little endian.
func load32(s string) uint64 {
	_ = s[3]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24
}
