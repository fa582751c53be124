package algorithm

import (
	"fmt"
	"time"
)

// The tests of this package name policies as package ratelimit does, with
// types of their own: package algorithm imports nothing of the module, and
// its tests cannot (the module's root imports it).

type kind uint8

const (
	slidingWindow kind = iota
	fixedWindow
	slidingWindowCounter
	gcra
)

const maxLogLimit = 10_000

func kinds() []kind { return []kind{slidingWindow, fixedWindow, slidingWindowCounter, gcra} }

func (k kind) String() string {
	return [...]string{"sliding", "fixed", "counter", "gcra"}[k]
}

type policy struct {
	Limit     int
	Window    time.Duration
	Algorithm kind
	Burst     int
}

func newPolicy(alg kind, n int, window time.Duration) policy {
	p := policy{Limit: n, Window: window, Algorithm: alg}
	if alg == gcra {
		p.Burst = n
	}
	return p
}

func (p policy) MaxCost() int {
	if p.Algorithm == gcra {
		return p.Burst
	}
	return p.Limit
}

func (p policy) String() string { return fmt.Sprintf("%d per %v (%v)", p.Limit, p.Window, p.Algorithm) }
