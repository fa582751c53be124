package storetest

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/conformance"
	"github.com/ratelimit-go/ratelimit/servertest/serverinfo"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// ShortDenials checks the denials of a short sliding log (a limit of at
// most lua.ShortLog, one string of a header and its units' times):
// answered from the header and the units they need, read by GETRANGE, not
// from the log read whole (a GET of a full log of 100 units cost the
// server 0.8 µs more than one of 16 bytes), and answered as the model
// answers whatever the log holds. On a server of its own, whose command
// statistics are the checks' alone.
func ShortDenials(t *testing.T, kind testserver.Kind, newStore NewStore) {
	addr := testserver.Own(t, kind).Addr
	t.Run("a denial reads the units it needs, not the log", func(t *testing.T) { shortDenialReads(t, addr, newStore) })
	t.Run("takes, peeks and charges answer as the model", func(t *testing.T) { shortAsModel(t, addr, newStore) })
	t.Run("a log of units without a header counts every unit", func(t *testing.T) { headerless(t, addr, newStore) })
}

// headerless: a full short log of units and no header (as one was
// written before the header), at limits of 5 and 40, holds no header of
// ours, and is healed with every byte taken for a unit: its units count,
// its denial is exact, and the take that writes it next writes the
// header.
func headerless(t *testing.T, addr string, newStore NewStore) {
	ctx := context.Background()
	a := Admin(t, addr)
	s := newStore(t, addr)
	for _, limit := range []int{5, 40} {
		pre := Prefix()
		p := ratelimit.PerHour(limit)
		rule, keys := ruleOf(t, pre, p, time.Hour), keysOf(t, pre, "k", p)
		start := time.Now().UnixMicro()
		var units []byte
		for i := range int64(limit) {
			units = binary.LittleEndian.AppendUint64(units, math.Float64bits(float64(start+i)))
		}
		require.NoError(t, a.Set(ctx, keys[0], units, time.Hour).Err())
		req := backend.Request{Rule: rule, Key: "k", Cost: 1, Now: start + 100}
		want := backend.Outcome{Count: int64(limit), ResetAt: start + time.Hour.Microseconds(), RetryAfter: time.Hour.Microseconds() - 100, At: start + 100}
		out, err := s.Peek(ctx, req)
		require.NoError(t, err)
		require.Equal(t, want, out, "limit %d: a peek", limit)
		out, err = s.Take(ctx, req)
		require.NoError(t, err)
		require.Equal(t, want, out, "limit %d: a take", limit)
		b, err := a.Get(ctx, keys[0]).Bytes()
		require.NoError(t, err)
		header := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, math.Float64bits(float64(limit))), math.Float64bits(float64(start+int64(limit)-1)))
		require.Equal(t, append(header, units...), b, "limit %d: the take healed the log: its header, then the same units", limit)
	}
}

// shortDenialReads: a full log of 100 units, then denials and peeks of
// cost 1 and 3, after a charge past the limit too: each reads the header
// and the oldest unit in one range (GETRANGE), and the unit that must
// leave in another when that is not the oldest, no GET; and answers with
// the count and that unit's retry.
func shortDenialReads(t *testing.T, addr string, newStore NewStore) {
	ctx := context.Background()
	a := Admin(t, addr)
	s := newStore(t, addr)
	rule := ruleOf(t, Prefix(), ratelimit.PerHour(100), time.Hour)
	start := time.Now().UnixMicro()
	req := func(cost, at int64) backend.Request {
		return backend.Request{Rule: rule, Key: "k", Cost: cost, Now: start + at}
	}
	for i := int64(0); i < 100; i++ { // the i-th unit at start+i µs
		out, err := s.Take(ctx, req(1, i))
		require.NoError(t, err)
		require.True(t, out.Allowed())
	}
	hour := time.Hour.Microseconds()
	check := func(over int64) {
		t.Helper()
		require.NoError(t, a.ConfigResetStat(ctx).Err())
		const now = 1000
		ranges := int64(0)
		for _, cost := range []int64{1, 3} {
			k := over + cost        // the k-th oldest unit (at start+k-1) must leave
			ranges += 2 * min(k, 2) // a take and a peek: the header, then unit k unless the oldest
			want := backend.Outcome{Count: 100 + over, ResetAt: start + hour, RetryAfter: k - 1 + hour - now, At: start + now}
			out, err := s.Take(ctx, req(cost, now))
			require.NoError(t, err)
			require.Equal(t, want, out, "a take of %d, %d over the limit", cost, over)
			out, err = s.Peek(ctx, req(cost, now))
			require.NoError(t, err)
			require.Equal(t, want, out, "a peek of %d, %d over the limit", cost, over)
		}
		calls, err := serverinfo.CommandCalls(ctx, a)
		require.NoError(t, err)
		require.Zero(t, calls["get"], "no GET of the log")
		require.Equal(t, ranges, calls["getrange"], "%d over the limit: a range a denial, two where the oldest need not leave", over)
	}
	check(0)
	out, err := s.Charge(ctx, req(1, 500)) // recorded past the limit
	require.NoError(t, err)
	require.False(t, out.Allowed())
	check(1)
}

// shortAsModel decides random takes, peeks and charges on short logs (5
// a second over 3 keys, 40 in 10 seconds on one), costs up to 3, at times
// that step by a microsecond to more than a second and now and then back
// by 30 ms (a skewed caller), and requires every answer the model gives:
// the denials read in part and the decisions that read the log whole
// agree.
func shortAsModel(t *testing.T, addr string, newStore NewStore) {
	ctx := context.Background()
	for _, c := range []struct {
		p    ratelimit.Policy
		keys int
	}{{ratelimit.PerSecond(5), 3}, {ratelimit.NewPolicy(ratelimit.SlidingWindow, 40, 10*time.Second), 1}} {
		s, m := newStore(t, addr), conformance.NewModel()
		rule := ruleOf(t, Prefix(), c.p, time.Hour)
		r := rand.New(rand.NewPCG(7, 51))
		steps := []int64{0, 1, 1_000, 30_000, 200_000, 1_100_000, -30_000}
		now := time.Now().UnixMicro()
		denials := 0
		for i := range 3_000 {
			now += steps[r.IntN(len(steps))]
			req := backend.Request{Rule: rule, Key: "k" + strconv.Itoa(r.IntN(c.keys)), Cost: 1 + r.Int64N(3), Now: now}
			var got, want backend.Outcome
			var err error
			switch op := r.IntN(10); {
			case op < 6:
				got, err = s.Take(ctx, req)
				want = m.Take(req)
			case op < 9:
				got, err = s.Peek(ctx, req)
				want = m.Peek(req)
			default:
				got, err = s.Charge(ctx, req)
				want = m.Charge(req)
			}
			require.NoError(t, err)
			require.Equal(t, want, got, "%v: decision %d: %+v", c.p, i, req)
			if !got.Allowed() {
				denials++
			}
		}
		require.Greater(t, denials, 300, "%v: denials decided", c.p)
	}
}
