// Package rediscore is the Redis-protocol store's flow, shared by the Redis
// and Valkey backends, which are each a Client of it over their client
// library; package lua is what it runs on the server. One job per file:
//
//   - store.go: the store's flow whatever the client (Store, Client);
//   - apart.go: several requests on keys of several shards (TakeAll);
//   - changes.go: the channel of changes a near cache listens to;
//   - clock.go: the server's clock, estimated;
//   - replicas.go: the replicas' acknowledgement (WAIT);
//   - call.go: guards on a client's call (context, panic, a client that
//     does not watch its context).
package rediscore

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
)

// Client is what a Redis-protocol store does through its client library:
// run a script, load the library, delete keys, publish a change. Each
// method bounds its call as its library needs (a deadline the client may
// not honour, a retry to prevent) and returns the server's reply.
type Client interface {
	// Run runs req's script for op: the FCALL of its algorithm's function
	// when fcall, else its EVALSHA (and EVAL after NOSCRIPT); with acked,
	// the EVALSHA and WAIT in one round trip to the master of req's key.
	// The reply is packed (lua.Unpack).
	Run(ctx context.Context, req backend.Request, op lua.Op, fcall, acked bool) (string, error)
	// RunAll runs All for reqs on keys (KeysAll) for op: the FCALL of
	// lua.AllFunction when fcall, else All's EVALSHA (and EVAL after
	// NOSCRIPT); with acked, the EVALSHA and WAIT on the master of
	// reqs[0]'s key.
	// Requests on the store's clock whose scripts need not read TIME are
	// decided at now when it is not 0 (lua's ForAllAt).
	RunAll(ctx context.Context, reqs []backend.Request, keys []string, op lua.Op, now int64, fcall, acked bool) ([]int64, error)
	// LoadLibrary loads Library on the server that decides req's key. A
	// library already there is loaded; refused says the server answered
	// with a refusal, as opposed to not answering.
	LoadLibrary(ctx context.Context, req backend.Request) (refused bool, err error)
	// Del deletes keys, the state of key; with acked, with WAIT.
	Del(ctx context.Context, keys []string, key string, acked bool) error
	// Publish sends payload on Channel; a failure is not reported (see
	// Store.changed).
	Publish(ctx context.Context, payload string)
	// Time reads the server's clock (TIME): for a cluster or a ring, any
	// node's.
	Time(ctx context.Context) (time.Time, error)
}

// Store is the part of a Redis-protocol store that is the same whatever
// the client library: validation, a function or a script, the replicas'
// acknowledgement, the reply, TakeAll's plan, and the news of a change. A
// backend is its Client and what its library alone knows (a cluster's
// layout, a subscription).
type Store struct {
	// Name begins every error: "ratelimit/redis".
	Name   string
	Client Client
	// Acked makes every write wait for the replicas (WithReplicaAck).
	Acked bool
	// OneServer says every key is on one server (not a cluster or a
	// ring): TakeAll then runs one script for any keys.
	OneServer bool
	// scriptsUntil, while not 0, is when (Unix ns) decisions try FCALL
	// again after the server refused functions: until then they run
	// EVALSHA. retryIn is the wait after the next refusal: it doubles on
	// each refusal up to maxFunctionRetry, so a server without functions
	// costs one refused FCALL a minute, and one that refused for a moment
	// (a FUNCTION FLUSH race, an ACL changed and changed back) has FCALL
	// back within a second or two.
	scriptsUntil atomic.Int64
	retryIn      atomic.Int64
	// clock is the server's clock as estimated (clock.go).
	clock serverClock
}

// The waits before trying FCALL again after a refusal: the first, and the
// longest (see Store.scriptsUntil).
const (
	minFunctionRetry = time.Second
	maxFunctionRetry = time.Minute
)

// scripted reports whether decisions run EVALSHA now, the server having
// refused functions a moment ago.
func (s *Store) scripted() bool {
	until := s.scriptsUntil.Load()
	return until != 0 && time.Now().UnixNano() < until
}

// refused notes that the server refused functions: EVALSHA for a while.
func (s *Store) refused() {
	wait := max(time.Duration(s.retryIn.Load()), minFunctionRetry)
	s.scriptsUntil.Store(time.Now().Add(wait).UnixNano())
	s.retryIn.Store(int64(min(2*wait, maxFunctionRetry)))
}

// accepted notes an FCALL the server ran: the next refusal waits the least.
func (s *Store) accepted() {
	if s.scriptsUntil.Load() != 0 {
		s.scriptsUntil.Store(0)
		s.retryIn.Store(0)
	}
}

// The contract's operations, each one FCALL (or EVALSHA): a store of this
// engine (backend/redis, backend/valkey) embeds Store and has them all,
// with no hand-forwarding; each adds its own Info. The script of a Charge,
// a Refund or an Undo publishes the change on the channel of changes
// (lua.News), as Reset does after its DEL.

// Take implements backend.Store.
func (s *Store) Take(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	return s.Decide(ctx, req, lua.Take)
}

// Peek implements backend.Store: a call that writes nothing.
func (s *Store) Peek(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	return s.Decide(ctx, req, lua.Peek)
}

// Charge implements backend.Store.
func (s *Store) Charge(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	return s.Decide(ctx, req, lua.Charge)
}

// Refund implements backend.Store.
func (s *Store) Refund(ctx context.Context, req backend.Request) (backend.Outcome, error) {
	return s.Decide(ctx, req, lua.Refund)
}

// Acquire implements backend.Store.
func (s *Store) Acquire(ctx context.Context, req backend.Request, id int64) (backend.Outcome, error) {
	return s.Permit(ctx, req, id, lua.Acquire)
}

// Release implements backend.Store.
func (s *Store) Release(ctx context.Context, req backend.Request, id int64) (backend.Outcome, error) {
	return s.Permit(ctx, req, id, lua.Release)
}

// Decide makes req's decision for op: one FCALL (or EVALSHA), which for a
// Refund or a Charge also publishes the news of the change. A Refund of
// req.Admitted undoes that admission (lua.Undo).
func (s *Store) Decide(ctx context.Context, req backend.Request, op lua.Op) (out backend.Outcome, err error) {
	defer Recover(s.Name, &err)
	validate := req.Validate
	switch {
	case req.Rule != nil && req.Rule.Algorithm() == backend.InFlight && op != lua.Peek:
		return backend.Outcome{}, fmt.Errorf("%s: %w", s.Name, backend.Unsupported("a take, a charge or a refund of permits", backend.InFlight))
	case op == lua.Charge:
		validate = req.ValidateCharge
	case op == lua.Refund && req.Admitted != 0:
		op = lua.Undo
	}
	if err := validate(); err != nil {
		return backend.Outcome{}, fmt.Errorf("%s: %w", s.Name, err)
	}
	if req.Now == 0 && !lua.ReadsTime(req.Rule.Algorithm()) {
		// negative from here on (lua.Estimated), so that the script tells
		// it from a caller's time; 0: the script reads TIME
		req.Now = lua.Estimated(s.clock.now(s.Client))
	}
	reply, err := s.run(ctx, req, op)
	if err == nil {
		out, err = lua.Unpack(reply)
	}
	if err != nil {
		return backend.Outcome{}, fmt.Errorf("%s: %w", s.Name, WithContext(ctx, err))
	}
	// A Refund's, an Undo's or a Charge's news (a near cache's denial of
	// the key is no longer exact) went out from the script, after the
	// change, in the same call.
	return out, nil
}

// Permit acquires (or renews) permit id of req's key, or releases it (op
// Acquire or Release): one FCALL (or EVALSHA).
func (s *Store) Permit(ctx context.Context, req backend.Request, id int64, op lua.Op) (out backend.Outcome, err error) {
	defer Recover(s.Name, &err)
	if err := req.ValidateAcquire(id); err != nil {
		return backend.Outcome{}, fmt.Errorf("%s: %w", s.Name, err)
	}
	req.Admitted = id // the script's ARGV[5]
	reply, err := s.run(ctx, req, op)
	if err == nil {
		out, err = lua.Unpack(reply)
	}
	if err != nil {
		return backend.Outcome{}, fmt.Errorf("%s: %w", s.Name, WithContext(ctx, err))
	}
	return out, nil
}

// run runs req's script for op (see script).
func (s *Store) run(ctx context.Context, req backend.Request, op lua.Op) (string, error) {
	acked := s.Acked && op != lua.Peek
	return script(ctx, s, req, acked, func(fcall bool) (string, error) {
		return s.Client.Run(ctx, req, op, fcall, acked)
	})
}

// script runs a decision by call: as an FCALL (call(true)) while the
// server may have functions, loading the library where req's key is
// decided when it does not have it yet; else, and for a write the replicas
// acknowledge (acked), as EVALSHA (call(false)).
func script[R any](ctx context.Context, s *Store, req backend.Request, acked bool, call func(fcall bool) (R, error)) (R, error) {
	if acked || s.scripted() {
		return call(false)
	}
	reply, err := call(true)
	refused := false
	if lua.FunctionMissing(err) {
		var lerr error
		refused, lerr = s.Client.LoadLibrary(ctx, req)
		switch {
		case lerr == nil:
			reply, err = call(true)
		case !refused: // no answer: the call fails as any would
			var none R
			return none, lerr
		}
	}
	if !refused && !lua.NoFunctions(err) && !lua.FunctionMissing(err) {
		if err == nil {
			s.accepted()
		}
		return reply, err
	}
	// A server without functions (before Redis 7), an ACL that forbids
	// them, a library the server refused, or one loaded yet not found where
	// the call went (a ring client routes FUNCTION LOAD elsewhere): EVALSHA,
	// until FCALL is tried again (refused).
	s.refused()
	return call(false)
}

// TakeAll implements backend.Store: one request by its own script or
// function, as Take but for a denial, which writes nothing (a Multi of one
// policy: httplimit's, ratelimitd's one descriptor); several by one call
// (All's function, or All by EVALSHA) for every request, whatever their
// keys, on one server; on a cluster or a
// ring, one for requests on one caller's key (one hash tag), and for keys
// of several tags a script per tag, sent at once, in two steps (TakeApart:
// a peek, then a take if every one would admit), or, when Acked, a refusal
// (errors.ErrUnsupported).
func (s *Store) TakeAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) (err error) {
	defer Recover(s.Name, &err)
	if len(reqs) == 1 && len(outs) == 1 {
		outs[0], err = s.Decide(ctx, reqs[0], lua.TakeQuiet)
		return err
	}
	if err := TakeAll(ctx, reqs, outs, s.OneServer, !s.Acked, s.all); err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	return nil
}

// PeekAll implements backend.Store: one request by its own script or
// function (Peek); several by one call (All's, op Look) for every request
// on one server or one hash tag, and on a cluster or a ring, one per tag,
// sent at once.
func (s *Store) PeekAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) (err error) {
	defer Recover(s.Name, &err)
	if len(reqs) == 1 && len(outs) == 1 {
		outs[0], err = s.Decide(ctx, reqs[0], lua.Peek)
		return err
	}
	if err := PeekAll(ctx, reqs, outs, s.OneServer, s.all); err != nil {
		clear(outs)
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	return nil
}

// ChargeAll implements backend.Store: one request by its own script or
// function (Charge); several by one call (All's, op Charge), which
// publishes the news of each change, as PeekAll groups them.
func (s *Store) ChargeAll(ctx context.Context, reqs []backend.Request, outs []backend.Outcome) (err error) {
	defer Recover(s.Name, &err)
	if len(reqs) == 1 && len(outs) == 1 {
		outs[0], err = s.Decide(ctx, reqs[0], lua.Charge)
		return err
	}
	if err := ChargeAll(ctx, reqs, outs, s.OneServer, s.all); err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	return nil
}

// all runs All (or its function: see script) for reqs on keys, with op,
// into outs.
func (s *Store) all(ctx context.Context, reqs []backend.Request, keys []string, op lua.Op, outs []backend.Outcome) error {
	acked := s.Acked && op != lua.Peek && op != lua.Look
	var now int64 // 0: the script reads TIME
	for _, req := range reqs {
		if req.Now == 0 && !lua.ReadsTime(req.Rule.Algorithm()) { // one takes the estimate
			now = s.clock.now(s.Client)
			break
		}
	}
	reply, err := script(ctx, s, reqs[0], acked, func(fcall bool) ([]int64, error) {
		return s.Client.RunAll(ctx, reqs, keys, op, now, fcall, acked)
	})
	if err != nil {
		return err
	}
	return lua.Outcomes(reply, outs)
}

// Reset deletes key's state under every algorithm in one DEL, then tells
// of the change.
func (s *Store) Reset(ctx context.Context, prefix, key string) (err error) {
	defer Recover(s.Name, &err)
	if err := s.Client.Del(ctx, lua.AllKeys(prefix, key), key, s.Acked); err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	s.changed(ctx, prefix, key)
	return nil
}

// changed tells the other processes' listeners of a change to key under
// prefix. A failure is not the caller's: the change itself was made, and a
// listener that missed it remembers no longer than its own bound.
func (s *Store) changed(ctx context.Context, prefix, key string) {
	s.Client.Publish(ctx, Change(prefix, key))
}
