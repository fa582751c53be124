// Package grpclimit puts ratelimit policies in front of gRPC servers: unary
// and stream server interceptors, the gRPC counterpart of httplimit. It is a
// module of its own, so that only its importers build gRPC.
//
// An Interceptor holds one or more Rules, each a Limiter and the KeyFunc
// that picks the call's key for it (its peer's address, a metadata value,
// the method, a value in the context). A call goes through only if every
// rule admits it (see ratelimit.Multi); a stream is decided once, when it
// opens. A denied call fails with codes.ResourceExhausted, and says when to
// try again twice, as the two kinds of clients read it:
//
//   - the trailer grpc-retry-pushback-ms (the delay in milliseconds, rounded
//     up), which grpc-go's own retry obeys, under a retryPolicy in the
//     client's service config that lists RESOURCE_EXHAUSTED; grpc-go never
//     reads RetryInfo;
//
//   - a RetryInfo detail with the exact delay, which some higher-level
//     clients read (OpenTelemetry's OTLP exporters, some Google Cloud
//     clients) and any client can:
//
//     st := status.Convert(err) // codes.ResourceExhausted
//     for _, d := range st.Details() {
//     if ri, ok := d.(*errdetails.RetryInfo); ok { wait := ri.GetRetryDelay().AsDuration() ... }
//     }
//
// A rule whose Limiter's policy is InFlight (ratelimit.Concurrency) holds a
// permit while the handler runs (a stream's, until it ends), taken once the
// other rules admitted the call; when every permit is held the call fails
// with codes.ResourceExhausted and a RetryInfo of when the first lease ends.
//
// When a store fails, the Limiter's failure mode decides, as in httplimit:
// a Limiter that fails closed (the default) fails the call with
// codes.Unavailable; one built WithFailOpen lets it through. A call with no
// key (ErrNoKey: a missing metadata value...) or a key the Limiter rejects
// fails with codes.InvalidArgument. WithErrorHandler changes both.
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/frontend"
)

// ErrNoKey: a KeyFunc found nothing to limit the call by (no such metadata,
// no peer address...). By default such a call fails with
// codes.InvalidArgument.
var ErrNoKey = errors.New("ratelimit/grpclimit: no key for the call")

// KeyFunc picks the key a Rule limits a call by, from its context (which
// holds its metadata and peer) and its full method name
// ("/package.Service/Method").
type KeyFunc func(ctx context.Context, fullMethod string) (string, error)

// Rule limits calls by Limiter, keyed by Key.
type Rule struct {
	Limiter *ratelimit.Limiter
	Key     KeyFunc
	// Cost is what a call takes from the rule before its handler runs
	// (nil: 1, or for a Usage rule 0). A cost of 0 checks the rule without
	// taking from it: the call is denied once its quota is spent. An error
	// is the call's, as a KeyFunc's.
	Cost func(ctx context.Context, fullMethod string) (int, error)
	// Usage makes the rule a budget of what handlers report with
	// ReportUsage (tokens, bytes): once the handler returns (a stream's,
	// when the stream ends), the rule is charged what was reported, less
	// what Cost took before (ratelimit.Limiter.Settle). A call that reports
	// nothing, where Cost took nothing, costs no call after the handler.
	Usage bool
}

// Interceptor applies Rules to calls. Create it with New.
type Interceptor struct {
	rules   []Rule           // the rates', decided together
	permits []Rule           // the InFlight policies', a permit each held while the handler runs
	multi   *ratelimit.Multi // nil: no rate
	plain   bool             // every rule takes 1 and none is a Usage rule: Multi.Allow
	onError func(ctx context.Context, err error) error
}

// Option configures an Interceptor.
type Option func(*Interceptor)

// WithErrorHandler replaces the error of a call that cannot be decided (a
// KeyFunc error, a key the Limiter rejects, a store error under a Limiter
// that fails closed): h returns the error the call fails with.
func WithErrorHandler(h func(ctx context.Context, err error) error) Option {
	return func(i *Interceptor) { i.onError = h }
}

// New returns an Interceptor applying rules, in order, to every call.
func New(rules []Rule, opts ...Option) (*Interceptor, error) {
	if len(rules) == 0 {
		return nil, fmt.Errorf("%w: no rules", ratelimit.ErrInvalidArgument)
	}
	i := &Interceptor{plain: true, onError: failed}
	var limiters []*ratelimit.Limiter
	for n, r := range rules {
		switch {
		case r.Limiter == nil || r.Key == nil:
			return nil, fmt.Errorf("%w: rule %d has no limiter or no key function", ratelimit.ErrInvalidArgument, n)
		case r.Limiter.Policy().Algorithm == ratelimit.InFlight:
			i.permits = append(i.permits, r)
			continue
		}
		i.rules, limiters = append(i.rules, r), append(limiters, r.Limiter)
		i.plain = i.plain && r.Cost == nil && !r.Usage
	}
	if len(limiters) > 0 {
		var err error
		if i.multi, err = ratelimit.NewMulti(limiters...); err != nil {
			return nil, err
		}
	}
	for _, o := range opts {
		o(i)
	}
	return i, nil
}

// Unary is the interceptor of unary calls (grpc.UnaryInterceptor).
func (i *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		a, held, err := i.enter(ctx, info.FullMethod)
		if err != nil {
			if md := pushback(err); md != nil {
				_ = grpc.SetTrailer(ctx, md) // fails only outside a server's call
			}
			return nil, err
		}
		defer frontend.Release(ctx, held)
		if a == nil {
			return handler(ctx, req)
		}
		defer a.settle(ctx, i.rules)
		return handler(a.context(ctx), req)
	}
}

// Stream is the interceptor of streams (grpc.StreamInterceptor): a stream
// is decided once, when it opens.
func (i *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		a, held, err := i.enter(ss.Context(), info.FullMethod)
		if err != nil {
			if md := pushback(err); md != nil {
				ss.SetTrailer(md)
			}
			return err
		}
		defer frontend.Release(ss.Context(), held)
		if a == nil {
			return handler(srv, ss)
		}
		defer a.settle(ss.Context(), i.rules)
		return handler(srv, &usageStream{ServerStream: ss, ctx: a.context(ss.Context())})
	}
}

// enter admits the call (a nil error) with its admission to settle after
// the handler (nil for plain rules) and the permits it holds until then, or
// returns the error it fails with.
//
// Permits come first: a call they deny takes nothing from the rates, and
// one the rates deny gives its permits straight back (a permit denial after
// the rates' admission once cost the rates' quota).
func (i *Interceptor) enter(ctx context.Context, method string) (*admission, []*ratelimit.Permit, error) {
	var held []*ratelimit.Permit
	if len(i.permits) > 0 {
		var err error
		if held, err = i.acquire(ctx, method); err != nil {
			return nil, nil, err
		}
	}
	a, err := i.decide(ctx, method)
	if err != nil {
		frontend.Release(ctx, held)
		return nil, nil, err
	}
	return a, held, nil
}

// decide admits the call by the rates (a nil error: with its admission to
// settle after the handler, but for plain rules) or returns the error it
// fails with.
func (i *Interceptor) decide(ctx context.Context, method string) (*admission, error) {
	if i.multi == nil {
		return nil, nil
	}
	keys := make([]string, len(i.rules))
	for n, rule := range i.rules {
		k, err := rule.Key(ctx, method)
		if err == nil && k == "" {
			err = ErrNoKey
		}
		if err != nil {
			return nil, i.onError(ctx, err)
		}
		keys[n] = k
	}
	var d ratelimit.MultiDecision
	var costs []int
	var err error
	if i.plain {
		d, err = i.multi.Allow(ctx, keys...)
	} else if costs, err = i.costs(ctx, method); err == nil {
		d, err = i.multi.AllowCosts(ctx, keys, costs)
	}
	if err != nil { // failed closed, or bad input
		return nil, i.onError(ctx, err)
	}
	if d.Allowed {
		if i.plain {
			return nil, nil
		}
		return &admission{keys: keys, costs: costs, d: d}, nil
	}
	return nil, exhausted(d.Decision, d.Name)
}

// exhausted is the error of a call the Limiter named name denied as d:
// ResourceExhausted, with a RetryInfo of d's RetryAfter.
func exhausted(d ratelimit.Decision, name string) error {
	msg := "rate limit exceeded"
	if name != "" {
		msg += " (" + name + ")"
	}
	st, err := status.New(codes.ResourceExhausted, msg).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)})
	if err != nil { // a detail that cannot be marshalled: not with these types
		return status.Error(codes.ResourceExhausted, msg)
	}
	return st.Err()
}

// pushback is the trailer that tells grpc-go's own retry (a retryPolicy
// that lists RESOURCE_EXHAUSTED) when to try again: grpc-retry-pushback-ms,
// the denial's RetryAfter in milliseconds, rounded up. grpc-go reads it,
// not RetryInfo, and only on a trailers-only response, which a call failed
// by an interceptor is. nil for an error that is no denial.
func pushback(err error) metadata.MD {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return nil
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			ms := (ri.GetRetryDelay().AsDuration() + time.Millisecond - 1) / time.Millisecond
			return metadata.Pairs("grpc-retry-pushback-ms", strconv.FormatInt(int64(ms), 10))
		}
	}
	return nil
}

// failed is the error of a call that could not be decided, with a short
// fixed message: the error's text may hold the client's own bytes or the
// store's internals (addresses, its client's errors), which are for logs
// (WithErrorHandler), not for the client.
func failed(_ context.Context, err error) error {
	switch {
	case errors.Is(err, ErrNoKey):
		return status.Error(codes.InvalidArgument, "rate limit: the call carries no key to limit by")
	case errors.Is(err, ratelimit.ErrInvalidKey):
		return status.Error(codes.InvalidArgument, "rate limit: the call's key is invalid")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, context.Canceled.Error())
	}
	return status.Error(codes.Unavailable, "rate limit: the limiter cannot decide now")
}

// PeerIP keys a call by its peer's IP address, IPv6 peers by their /64 (as
// httplimit.ClientIP does: anyone with a /64 has 2^64 addresses). A call
// without a peer address gets ErrNoKey.
func PeerIP() KeyFunc {
	return func(ctx context.Context, _ string) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", fmt.Errorf("%w: no peer", ErrNoKey)
		}
		host, _, err := net.SplitHostPort(p.Addr.String())
		if err != nil {
			host = p.Addr.String()
		}
		a, err := netip.ParseAddr(host)
		if err != nil {
			return "", fmt.Errorf("%w: peer %q is no IP address", ErrNoKey, p.Addr)
		}
		if a = a.Unmap(); a.Is6() {
			prefix, _ := a.WithZone("").Prefix(64)
			return prefix.String(), nil
		}
		return a.String(), nil
	}
}

// Metadata keys a call by the first value of a metadata key (an API token,
// a tenant id); a call without it gets ErrNoKey.
func Metadata(name string) KeyFunc {
	return func(ctx context.Context, _ string) (string, error) {
		if v := metadata.ValueFromIncomingContext(ctx, name); len(v) > 0 && v[0] != "" {
			return v[0], nil
		}
		return "", fmt.Errorf("%w: no %s metadata", ErrNoKey, name)
	}
}

// Method keys a call by its full method name: a limit per method, shared by
// every caller.
func Method() KeyFunc {
	return func(_ context.Context, fullMethod string) (string, error) { return fullMethod, nil }
}

// FromContext keys a call by a value an earlier interceptor put in its
// context (the authenticated user): a string or a fmt.Stringer; anything
// else is ErrNoKey.
func FromContext(key any) KeyFunc {
	return func(ctx context.Context, _ string) (string, error) {
		switch v := ctx.Value(key).(type) {
		case string:
			return v, nil
		case fmt.Stringer:
			return v.String(), nil
		}
		return "", fmt.Errorf("%w: no %v in the context", ErrNoKey, key)
	}
}
