package rediscore

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
)

// These check the estimator's rules with a reading function standing in for
// TIME; servertest's storetest checks the estimate against real servers.

// readFunc is a timeReader.
type readFunc func(context.Context) (time.Time, error)

func (f readFunc) Time(ctx context.Context) (time.Time, error) { return f(ctx) }

// calibrated returns c once a reading by read has been used. The first
// reading is held until the first estimate has been asked for: started on
// a goroutine of its own, it could otherwise end first on a busy machine
// (it did in CI), and that estimate would be the reading's, not "none".
func calibrated(t *testing.T, c *serverClock, read readFunc) {
	t.Helper()
	asked := make(chan struct{})
	var first atomic.Bool
	held := readFunc(func(ctx context.Context) (time.Time, error) {
		if first.CompareAndSwap(false, true) {
			<-asked
		}
		return read(ctx)
	})
	got := c.now(held)
	close(asked)
	require.Zero(t, got, "no estimate before the first reading: the script reads TIME")
	// Asking again takes another reading if that one was too slow to use
	// (a descheduled moment of a busy machine).
	require.Eventually(t, func() bool { c.now(read); return c.at.Load() != 0 }, 5*time.Second, time.Millisecond)
}

func TestServerClockFollowsTheServerNotTheProcess(t *testing.T) {
	// A server whose clock is 5s ahead of this process's wall clock: the
	// estimate is the server's time, never behind it and ahead by at most
	// the reading's round trip.
	const ahead = 5 * time.Second
	var took atomic.Int64
	read := readFunc(func(context.Context) (time.Time, error) { return time.Now().Add(ahead), nil })
	timed := readFunc(func(ctx context.Context) (time.Time, error) {
		began := time.Now()
		defer func() { took.Store(int64(time.Since(began))) }()
		return read(ctx)
	})
	var first serverClock
	calibrated(t, &first, timed)
	// Many readings, and estimates after each between two reads of the
	// server's clock as this test fakes it: the truncations to µs of a
	// reading, and of the monotonic clock at the reading and at the
	// estimate, must not put one behind (they did, by 1 µs, after about
	// one reading in ten). Each reading is taken here, not in the
	// background (next: none due), and one slower than maxReadingRTT (a
	// busy machine) is not used, so not checked.
	checked := 0
	for range 300 {
		var c serverClock
		c.next.Store(math.MaxInt64)
		c.calibrate(timed)
		if c.at.Load() == 0 {
			continue
		}
		checked++
		for range 20 {
			before := time.Now().Add(ahead).UnixMicro()
			got := c.now(timed)
			after := time.Now().Add(ahead).UnixMicro()
			require.GreaterOrEqual(t, got, before, "never behind the server")
			require.LessOrEqual(t, got, after+EstimateError.Microseconds())
		}
		// The reading was under maxReadingRTT or it would not have been used.
		require.Less(t, time.Duration(took.Load()), maxReadingRTT)
	}
	require.Greater(t, checked, 100, "readings used")
}

func TestServerClockReadsOnceAMoment(t *testing.T) {
	var reads atomic.Int64
	read := readFunc(func(context.Context) (time.Time, error) { reads.Add(1); return time.Now(), nil })
	var c serverClock
	calibrated(t, &c, read)
	began, before := time.Now(), reads.Load()
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				require.NotZero(t, c.now(read))
			}
		}()
	}
	wg.Wait()
	// 16,000 estimates: at most one reading a readEvery, the first of
	// them due when the calibrating one began.
	require.LessOrEqual(t, reads.Load()-before, int64(1+time.Since(began)/readEvery))
}

func TestServerClockDoesNotUseABadReading(t *testing.T) {
	cases := map[string]readFunc{
		"an error": func(context.Context) (time.Time, error) { return time.Time{}, errors.New("NOPERM TIME") },
		"a panic":  func(context.Context) (time.Time, error) { panic("a client's bug") },
		"a reading slower than maxReadingRTT": func(context.Context) (time.Time, error) {
			time.Sleep(2 * maxReadingRTT)
			return time.Now(), nil
		},
		"a time no store decides at": func(context.Context) (time.Time, error) { return time.Unix(-3600, 0), nil },
	}
	for name, read := range cases {
		t.Run(name, func(t *testing.T) {
			var c serverClock
			require.Zero(t, c.now(read))
			require.Eventually(t, func() bool { return !c.busy.Load() }, 5*time.Second, time.Millisecond)
			require.Zero(t, c.now(read), "the script reads TIME")
		})
	}
}

func TestServerClockReadsAgainSoonAfterASlowReading(t *testing.T) {
	// The first reading is too slow to use; the next is taken readAgain
	// after it ends, not readEvery after it began.
	var reads atomic.Int64
	var began [2]atomic.Int64 // when each reading began (monotonic)
	read := readFunc(func(context.Context) (time.Time, error) {
		n := reads.Add(1)
		if n <= 2 {
			began[n-1].Store(monotonic())
		}
		if n == 1 {
			time.Sleep(2 * maxReadingRTT)
		}
		return time.Now(), nil
	})
	var c serverClock
	for c.now(read) == 0 {
		time.Sleep(time.Millisecond)
		require.Less(t, reads.Load(), int64(3), "the second reading, fast, gives the estimate")
	}
	require.Equal(t, int64(2), reads.Load())
	apart := time.Duration(began[1].Load()-began[0].Load()) * time.Microsecond
	require.Less(t, apart, readEvery, "the second reading began %v after the first", apart)
	require.GreaterOrEqual(t, apart, 2*maxReadingRTT+readAgain, "not before the first ended, and readAgain after")
}

func TestServerClockKeepsTheShortestReading(t *testing.T) {
	var c serverClock
	keep := keepBest.Microseconds()
	c.use(reading{offset: 1000, rtt: 200, at: 10, ok: true})
	c.use(reading{offset: 5000, rtt: 8000, at: 20, ok: true}) // a busy moment
	require.Equal(t, int64(1000), c.offset.Load(), "a reading with a longer round trip does not move the estimate")
	require.Equal(t, int64(20), c.at.Load(), "but it says the server answers")
	c.use(reading{offset: 1100, rtt: 100, at: 30, ok: true})
	require.Equal(t, int64(1100), c.offset.Load(), "a shorter round trip replaces it")
	c.use(reading{offset: 1400, rtt: 400, at: 40, ok: true})
	c.use(reading{offset: 1300, rtt: 300, at: 50, ok: true})
	c.use(reading{offset: 1500, rtt: 500, at: 30 + keep - 1, ok: true})
	require.Equal(t, int64(1100), c.offset.Load(), "kept for keepBest")
	c.use(reading{offset: 1600, rtt: 600, at: 30 + keep, ok: true})
	require.Equal(t, int64(1300), c.offset.Load(), "then the shortest since replaces it")
	require.Equal(t, 30+keep, c.at.Load())
	c.use(reading{offset: 1700, rtt: 700, at: 50 + keep - 1, ok: true})
	require.Equal(t, int64(1300), c.offset.Load(), "kept for keepBest from its own reading")
	c.use(reading{offset: 1800, rtt: 800, at: 50 + keep, ok: true})
	require.Equal(t, int64(1700), c.offset.Load(), "the shortest since, however long")
}

// A store's estimate once stepped back by up to half a reading's round trip
// when it took over from the scripts' TIME, or when a new reading replaced
// the one in use: a caller who waited a denial's RetryAfter was denied again
// (the conformance kit's store-clock scenario, on a busy CI machine).
func TestServerClockDoesNotStepBack(t *testing.T) {
	// The estimate is the latest the server's time can be: a reading sent
	// at 100 (µs, monotonic) answering 1000 says offset 900, whatever its
	// round trip.
	var c serverClock
	c.use(reading{offset: 900, rtt: 400, at: 500, ok: true})
	require.Equal(t, int64(900), c.offset.Load())
	// A shorter reading that would move it back 2 ms (within readings'
	// errors) moves it back maxStepBack a reading.
	c.use(reading{offset: 900 - 2000, rtt: 100, at: 1_000_500, ok: true})
	require.Equal(t, int64(900-maxStepBack), c.offset.Load())
	c.use(reading{offset: 900 - 2000, rtt: 100, at: 2_000_500, ok: true})
	require.Equal(t, int64(900-2*maxStepBack), c.offset.Load(), "slewed, a reading at a time")
	c.use(reading{offset: 5000, rtt: 100, at: 3_000_500, ok: true})
	require.Equal(t, int64(5000), c.offset.Load(), "forward at once")
	// Back by more than readings' errors explain: the server's clock moved.
	c.use(reading{offset: -1_000_000, rtt: 50, at: 4_000_500, ok: true})
	require.Equal(t, int64(-1_000_000), c.offset.Load(), "a server's step is taken")
	// After the estimate expired (the scripts read TIME meanwhile), the
	// next reading is taken as it is: never behind, it does not step back.
	c.use(reading{offset: -1_000_000 - 2000, rtt: 40, at: 4_000_500 + estimateLife.Microseconds() + 1, ok: true})
	require.Equal(t, int64(-1_002_000), c.offset.Load())
}

func TestServerClockEstimateExpires(t *testing.T) {
	good := readFunc(func(context.Context) (time.Time, error) { return time.Now(), nil })
	failing := readFunc(func(context.Context) (time.Time, error) { return time.Time{}, errors.New("down") })
	var c serverClock
	calibrated(t, &c, good)
	require.NotZero(t, c.now(failing), "a reading that fails leaves the estimate while it is fresh")
	// The last good reading, estimateLife ago, with every one since failing.
	c.at.Store(monotonic() - estimateLife.Microseconds() - 1)
	require.Zero(t, c.now(failing), "an estimate older than estimateLife is not used")
}

func TestEstimateMarginCoversTheEstimate(t *testing.T) {
	// The sliding log's scripts allow lua.EstimateMargin for an estimate's
	// error: the bound at a reading, and a drift of 0.5 ms a second (what
	// NTP keeps clocks under) for as long as a reading is used.
	drift := estimateLife / 2000
	require.GreaterOrEqual(t, lua.EstimateMargin, EstimateError+drift)
	require.Less(t, lua.EstimateMargin, backend.KeepSlack/10, "a margin the TTL's slack hardly feels")
	require.Equal(t, int64(-5), lua.Estimated(5), "an estimate goes negative, a caller's time positive")
}
