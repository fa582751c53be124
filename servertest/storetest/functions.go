package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/servertest/serverinfo"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// Functions checks how a store runs its scripts: on a server with
// functions, one FCALL a decision and no EVALSHA once the library is loaded
// (by the store, on the first "Function not found"); on a server whose
// FCALL and FUNCTION are renamed away (as before Redis 7), or whose ACL
// forbids the client FUNCTION LOAD (NOPERM), one EVALSHA a decision, every
// answer the same; through a Multi of one policy and of two too. Each
// server is the test's own.
func Functions(t *testing.T, kind testserver.Kind, newStore NewStore) {
	cases := []struct {
		name    string
		extra   []string // the server's arguments
		acl     []any    // an ACL SETUSER for the default user
		without bool
	}{
		{name: "a server with functions: FCALL"},
		{name: "a server without functions: EVALSHA", without: true,
			extra: []string{"--rename-command", "FCALL", "", "--rename-command", "FUNCTION", ""}},
		{name: "an ACL that forbids FUNCTION LOAD: EVALSHA", without: true,
			acl: []any{"acl", "setuser", "default", "-function"}},
	}
	for _, tc := range cases {
		without := tc.without
		t.Run(tc.name, func(t *testing.T) {
			srv := testserver.Own(t, kind, tc.extra...)
			a := Admin(t, srv.Addr)
			ctx := context.Background()
			if tc.acl != nil {
				require.NoError(t, a.Do(ctx, tc.acl...).Err())
			}
			for _, alg := range backend.Algorithms() {
				st := newStore(t, srv.Addr)
				l := Limiter(t, st, ratelimit.NewPolicy(alg, 5, time.Hour), Prefix())
				_, err := l.Allow(ctx, "warm-up") // the library or the script loaded
				require.NoError(t, err)
				before, err := serverinfo.CommandStats(ctx, a)
				require.NoError(t, err)
				for i := 1; i <= 7; i++ {
					d, err := l.Allow(ctx, "user")
					require.NoError(t, err)
					require.Equal(t, i <= 5, d.Allowed, "%v: request %d", alg, i)
				}
				// A Multi of one policy (httplimit's, ratelimitd's one
				// descriptor) runs the request's own script too: it ran
				// TakeAll's EVALSHA of every algorithm's text.
				m, err := ratelimit.NewMulti(l)
				require.NoError(t, err)
				for i := 1; i <= 7; i++ {
					d, err := m.Allow(ctx, "other")
					require.NoError(t, err)
					require.Equal(t, i <= 5, d.Allowed, "%v: Multi, request %d", alg, i)
				}
				// Two policies together (TakeAll) are one FCALL too: they
				// were All's EVALSHA, which made every algorithm's
				// functions on every call.
				m2, err := ratelimit.NewMulti(l, Limiter(t, st, ratelimit.NewPolicy(alg, 5, time.Hour), Prefix()))
				require.NoError(t, err)
				for i := 1; i <= 7; i++ {
					d, err := m2.Allow(ctx, "both", "both")
					require.NoError(t, err)
					require.Equal(t, i <= 5, d.Allowed, "%v: Multi of two, request %d", alg, i)
				}
				after, err := serverinfo.CommandStats(ctx, a)
				require.NoError(t, err)
				calls := func(cmd string) int64 { return after[cmd].Calls - before[cmd].Calls }
				if without {
					require.EqualValues(t, 21, calls("evalsha"), "%v: EVALSHA a decision", alg)
				} else {
					require.EqualValues(t, 21, calls("fcall"), "%v: FCALL a decision", alg)
					require.Zero(t, calls("evalsha")+calls("eval"), "%v: no script", alg)
				}
			}
		})
	}
	t.Run("FCALL comes back after a moment's refusal", func(t *testing.T) { functionsComeBack(t, kind, newStore) })
}

// functionsComeBack: an ACL that forbids FCALL for a moment (as a FUNCTION
// FLUSH race, or a library of the same name, refuses it) sends decisions
// to EVALSHA, and FCALL is back within seconds of the refusal's end: one
// transient refusal once switched a store to EVALSHA for good (+44% of the
// server's time a decision, no signal).
func functionsComeBack(t *testing.T, kind testserver.Kind, newStore NewStore) {
	srv := testserver.Own(t, kind)
	a := Admin(t, srv.Addr)
	ctx := context.Background()
	l := Limiter(t, newStore(t, srv.Addr), ratelimit.NewPolicy(ratelimit.GCRA, 1_000_000, time.Second), Prefix())
	calls := func(cmd string) int64 {
		stats, err := serverinfo.CommandStats(ctx, a)
		require.NoError(t, err)
		return stats[cmd].Calls - stats[cmd].Failed
	}
	decide := func() {
		_, err := l.Allow(ctx, "user")
		require.NoError(t, err)
	}
	decide()
	require.Positive(t, calls("fcall"), "FCALL first")
	require.NoError(t, a.Do(ctx, "acl", "setuser", "default", "-fcall", "-function").Err())
	for i := 0; i < 10; i++ {
		decide()
	}
	require.Positive(t, calls("evalsha"), "EVALSHA while FCALL is refused")
	require.NoError(t, a.Do(ctx, "acl", "setuser", "default", "+@all").Err())
	before, back := calls("fcall"), time.Now()
	for deadline := time.Now().Add(10 * time.Second); calls("fcall") == before && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		decide()
	}
	require.Greater(t, calls("fcall"), before, "FCALL again within 10 s")
	t.Logf("FCALL back %v after the refusal ended", time.Since(back).Round(time.Millisecond))
}
