package rediscore

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
)

// The server's clock, estimated.
//
// On the store's clock (no Request.Now), a decision is made at the
// server's time, so that app instances whose clocks disagree share one
// timeline per key. A script that reads TIME pays for it on every call:
// about 0.8 µs of the server's time, a fifth of a fixed window's
// (docs/figures.md, "The server's clock, estimated"). So the store reads
// TIME itself about once a second, on a call of its own, and sends each
// decision the server's time as that reading and the process's monotonic
// clock place it:
//
//	server now ≈ reading + (monotonic now - monotonic time the reading was sent)
//
// The server read its clock somewhere between send and reply, so that is
// the latest the server's time can be: an estimate is never behind the
// server's clock, and ahead of it by at most the reading's round trip;
// one slower than maxReadingRTT is not used (EstimateError), plus the two
// clocks' drift since (NTP keeps it under 0.5 ms a second). Never behind,
// the estimate does not step back when it takes over from TIME in the
// scripts (a store's first decisions). Of the readings, the estimate keeps
// the one with the shortest round trip (as NTP's clock filter does) for
// up to keepBest, then the best since: a reading taken at a busy moment
// does not move it; and a reading that would move it back moves it back
// by at most maxStepBack. So a caller who waits a denial's RetryAfter is
// not denied again for the estimate having stepped back: across one
// reading it steps back 0.25 ms at most, less than a call's own round
// trip, and readings come a second apart. (A store whose first estimate
// was as far ahead as a slow reading allows comes back to the server's
// clock at 0.25 ms a second: the drift it follows so is up to 250 ppm,
// where NTP keeps clocks under 500 and most within 100.)
// That is the uncertainty a caller has anyway of when a script it sends
// reads TIME: somewhere within its own call's round trip. Instances whose
// estimates differ by so little share one timeline per key by the rules
// of backend.MaxSkew (a key's time never goes back). The process's own
// wall clock plays no part: a skewed or stepped machine clock changes
// nothing. On a cluster or a ring a reading is any node's: nodes whose
// clocks differ by less than backend.MaxSkew share one timeline per key as
// instances do.
//
// With no estimate (the first decisions of a store, or no reading used
// for estimateLife: TIME refused, the server too slow to answer), the
// scripts read TIME as before. The sliding log dates its keys' expiry by
// the server's clock, allowing for an estimate's error (lua.EstimateMargin);
// permits read TIME in their script whatever (lua.ReadsTime). The estimate
// goes as a negative time (lua.Estimated), which the scripts tell from a
// caller's. A TakeAll of several requests sends it once, in one script.
const (
	// readEvery is how often the store reads the server's clock.
	readEvery = time.Second
	// readAgain is how soon a reading too slow to use is taken again: a
	// busy moment says nothing of the next reading, and an estimate missed
	// for readEvery costs every call in it a TIME.
	readAgain = 10 * time.Millisecond
	// maxReadingRTT is the slowest reading used: the bound of an
	// estimate's error (how far ahead of the server's clock it may be).
	maxReadingRTT = 5 * time.Millisecond
	// maxStepBack is the most a reading moves the estimate back (µs).
	maxStepBack = 250
	// estimateLife is how long a reading is used when the next ones fail
	// or are too slow.
	estimateLife = 10 * time.Second
	// readTimeout bounds a reading.
	readTimeout = time.Second
	// keepBest is how long the reading with the shortest round trip is
	// kept when no reading as short comes.
	keepBest = 5 * time.Second
)

// EstimateError bounds how far an estimate is ahead of the server's clock
// when it is made, but for the clocks' drift since the reading; it is
// never behind.
const EstimateError = maxReadingRTT

// clockBase is the origin of the monotonic clock the estimates count on.
var clockBase = time.Now()

// monotonic is the time since clockBase (µs), from the process's monotonic
// clock; at least 1, so that 0 means never.
func monotonic() int64 { return int64(time.Since(clockBase)/time.Microsecond) + 1 }

// timeReader reads the server's clock: Client's Time.
type timeReader interface {
	Time(ctx context.Context) (time.Time, error)
}

// serverClock estimates the server's clock (see above); its zero value has
// no estimate. Safe for concurrent use.
type serverClock struct {
	// offset is the server's time less monotonic (µs), as the reading in
	// use says (the latest it may be); at is when (monotonic) the last
	// usable reading came back, 0 before one.
	offset, at atomic.Int64
	// in is the reading in use, and since the best taken after it (ok:
	// there is one): only calibrate uses them, one reading at a time.
	in, since reading
	// next is when (monotonic) the next reading may begin; busy says
	// one is in flight.
	next atomic.Int64
	busy atomic.Bool
}

// reading is what one reading of the server's clock said: offset (see
// serverClock), its round trip and when it came back (µs).
type reading struct {
	offset, rtt, at int64
	ok              bool
}

// use takes r, a usable reading, into the estimate (see keepBest).
func (c *serverClock) use(r reading) {
	latest := r.at
	switch {
	case !c.in.ok || r.rtt <= c.in.rtt:
		c.in, c.since = r, reading{}
	case r.at-c.in.at >= keepBest.Microseconds():
		if c.since.ok && c.since.rtt < r.rtt {
			r = c.since
		}
		c.in, c.since = r, reading{}
	case !c.since.ok || r.rtt < c.since.rtt:
		c.since = r
	}
	// Back by more than maxStepBack, but within what readings' errors
	// explain, the estimate is slewed; further back, the server's clock
	// moved (a step, a failover): taken, as the scripts' TIME would.
	offset := c.in.offset
	if old, at := c.offset.Load(), c.at.Load(); at != 0 && latest-at <= estimateLife.Microseconds() {
		if back := old - offset; back > maxStepBack && back <= 2*maxReadingRTT.Microseconds() {
			offset = old - maxStepBack
		}
	}
	c.offset.Store(offset)
	c.at.Store(latest)
}

// now returns the server's time (µs since the epoch) as estimated, or 0
// when there is no fresh estimate: the script then reads TIME. It starts a
// reading (server's Time, in the background) when one is due: readEvery
// after the last began, or readAgain after one too slow to use.
func (c *serverClock) now(server timeReader) int64 {
	local := monotonic()
	if local >= c.next.Load() && c.busy.CompareAndSwap(false, true) {
		c.next.Store(local + readEvery.Microseconds())
		go c.calibrate(server)
	}
	at := c.at.Load()
	if at == 0 || local-at > estimateLife.Microseconds() {
		return 0
	}
	now := local + c.offset.Load()
	if now < backend.MinMicros || now > backend.MaxMicros { // a server's clock no store decides at
		return 0
	}
	return now
}

// calibrate takes a reading of the server's clock, and uses it if it came
// back within maxReadingRTT (else takes another soon: readAgain). A panic
// of the client's is a failed reading: it runs on a goroutine of its own,
// where one would end the process.
func (c *serverClock) calibrate(server timeReader) {
	defer c.busy.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	sent := monotonic()
	var t time.Time
	var err error
	func() {
		defer Recover("", &err)
		t, err = server.Time(ctx)
	}()
	got := monotonic()
	if err != nil {
		return
	}
	if got-sent > maxReadingRTT.Microseconds() {
		c.next.Store(got + readAgain.Microseconds())
		return
	}
	// The reading and the two monotonic times an estimate counts from are
	// each cut to whole µs: together they may lose almost 2 µs, so the
	// offset gains one, and an estimate is never behind the server's
	// clock as TIME reads it (whole µs).
	c.use(reading{offset: t.UnixMicro() - sent + 1, rtt: got - sent, at: got, ok: true})
}
