package main

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// livePlane is a data plane in real time: every interval it serves the
// requests its demand brought since the last report (arrivals spread
// evenly), admitting what its assignment's token bucket holds, then
// reports them and applies the answer. An expired assignment denies all.
type livePlane struct {
	bucket *rlqsv3.BucketId
	mu     sync.Mutex
	demand float64 // requests a second
	stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient

	allowed, denied uint64
	tokens, size    float64
	fill            time.Duration // a token each; 0: deny all
	until           time.Time
	last            time.Time
}

// serve admits the requests that arrived in (p.last, now] and returns
// when each admitted one arrived.
func (p *livePlane) serve(now time.Time) []time.Time {
	var admitted []time.Time
	gap := time.Duration(float64(time.Second) / max(p.demand, 1e-9))
	for at := p.last.Add(gap); !at.After(now) && p.demand > 0; at = at.Add(gap) {
		if p.fill > 0 {
			p.tokens = min(p.size, p.tokens+float64(gap)/float64(p.fill))
		}
		if p.fill == 0 || !at.Before(p.until) || p.tokens < 1 {
			p.denied++
			continue
		}
		p.tokens--
		p.allowed++
		admitted = append(admitted, at)
	}
	p.last = now
	return admitted
}

// report sends the usage since the last report and applies the answer.
func (p *livePlane) report(elapsed time.Duration) error {
	if err := p.stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "fleet", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: p.bucket, TimeElapsed: durationpb.New(elapsed), NumRequestsAllowed: p.allowed, NumRequestsDenied: p.denied,
	}}}); err != nil {
		return err
	}
	p.allowed, p.denied = 0, 0
	res, err := p.stream.Recv()
	if err != nil {
		return err
	}
	a := res.GetBucketAction()[0].GetQuotaAssignmentAction()
	p.until = time.Now().Add(a.GetAssignmentTimeToLive().AsDuration())
	if tb := a.GetRateLimitStrategy().GetTokenBucket(); tb != nil {
		fill := tb.GetFillInterval().AsDuration() / time.Duration(tb.GetTokensPerFill().GetValue())
		if p.fill != fill || p.size != float64(tb.GetMaxTokens()) { // a new assignment starts full
			p.tokens = float64(tb.GetMaxTokens())
		}
		p.fill, p.size = fill, float64(tb.GetMaxTokens())
	} else {
		p.fill, p.size = 0, 0
	}
	return nil
}

// runFleet runs each plane of fleet every interval until ctx ends: it
// serves the requests since its last turn, reports them (on an error, once
// more on the stream reconnect gives, if it gives one) and tells what it
// admitted and its bucket's size. wait waits for them and returns the
// first error.
func runFleet(ctx context.Context, fleet []*livePlane, interval time.Duration,
	reconnect func(i int) rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient,
	tell func(i int, now time.Time, admitted []time.Time, size int)) (wait func() error) {
	var wg sync.WaitGroup
	errs := make(chan error, len(fleet))
	for i, p := range fleet {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(interval)
			defer tick.Stop()
			last := time.Now()
			for {
				select {
				case <-ctx.Done():
					return
				case now := <-tick.C:
					p.mu.Lock()
					admitted := p.serve(now)
					size := int(p.size)
					err := p.report(now.Sub(last))
					if err != nil && ctx.Err() == nil {
						if s := reconnect(i); s != nil {
							p.stream = s
							err = p.report(now.Sub(last))
						}
					}
					p.mu.Unlock()
					last = now
					if err != nil && ctx.Err() == nil {
						errs <- err
						return
					}
					tell(i, now, admitted, size)
				}
			}
		}()
	}
	return func() error {
		wg.Wait()
		close(errs)
		return <-errs
	}
}

// Two ratelimitd instances on one Redis serve a fleet of 20 planes (ten
// each), demand summing to about 5x a limit of 1,000 a second, skewed and
// shifting every 2 seconds; one instance is killed mid-run and its planes
// reconnect to the other as new ones. No second of arrivals admits more
// than the limit and the planes' bucket sizes (a tenth of each grant: a
// bucket filled in one second may be spent in the next, so both seconds'
// count), the holds read from the server never pass the limit, and after
// the kill the other instance serves the whole fleet (half the limit a
// second at least).
func TestTwoInstancesKeepOneLimitThroughAKill(t *testing.T) {
	cfg := writeConfig(t, filepath.Join(t.TempDir(), "fleet.yaml"), `
domain: fleet
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 1000}
`)
	srv := testserver.Own(t, testserver.Redis)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	const limit, planes, interval, ttl = 1000, 20, 200 * time.Millisecond, 300 * time.Millisecond
	instances := []*daemon{
		start(t, "-config", cfg, "-store", "redis://"+srv.Addr, "-rlqs-ttl", ttl.String()),
		start(t, "-config", cfg, "-store", "redis://"+srv.Addr, "-rlqs-ttl", ttl.String()),
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	connect := func(d *daemon) rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient {
		s, err := rlqsv3.NewRateLimitQuotaServiceClient(d.conn).StreamRateLimitQuotas(ctx)
		require.NoError(t, err)
		return s
	}

	var mu sync.Mutex
	perSecond := map[int64]int{}     // admitted, by second of arrival
	sizes := map[int64]map[int]int{} // each second's largest bucket size of each plane
	fleet := make([]*livePlane, planes)
	began := time.Now()
	for i := range fleet {
		fleet[i] = &livePlane{bucket: &rlqsv3.BucketId{Bucket: map[string]string{"tenant": "acme"}}, stream: connect(instances[i%2]), last: began}
	}
	rng := rand.New(rand.NewPCG(11, 12))
	shift := func() {
		for _, p := range fleet {
			p.mu.Lock()
			p.demand = rng.ExpFloat64() * 250
			p.mu.Unlock()
		}
		hot := fleet[rng.IntN(planes)]
		hot.mu.Lock()
		hot.demand = 3000
		hot.mu.Unlock()
	}
	shift()

	wait := runFleet(ctx, fleet, interval, func(i int) rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient {
		if i%2 == 0 {
			return nil
		}
		return connect(instances[0]) // its instance was killed: a new plane on the other
	}, func(i int, now time.Time, admitted []time.Time, size int) {
		mu.Lock()
		defer mu.Unlock()
		for _, at := range admitted {
			perSecond[at.Unix()]++
		}
		if sizes[now.Unix()] == nil {
			sizes[now.Unix()] = map[int]int{}
		}
		sizes[now.Unix()][i] = max(sizes[now.Unix()][i], size)
	})
	for step := range 40 { // 8 seconds in 200ms steps, the holds checked at each
		time.Sleep(interval)
		require.LessOrEqual(t, heldOnServer(t, admin), int64(limit), "step %d", step)
		switch step {
		case 10, 30:
			shift()
		case 20:
			instances[1].cmd.Process.Kill()
			<-instances[1].exited
		}
	}
	cancel()
	require.NoError(t, wait())
	mu.Lock()
	defer mu.Unlock()
	for sec, n := range perSecond {
		tenth := 0 // the planes' bucket sizes: a tenth of their grants
		for _, sz := range sizes[sec] {
			tenth += sz
		}
		for _, sz := range sizes[sec+1] { // a bucket filled in this second and spent in the next
			tenth += sz
		}
		require.LessOrEqual(t, n, limit+tenth, "second %d: admitted %d", sec-began.Unix(), n)
		t.Logf("second %d: admitted %d (the limit %d, the bucket sizes %d)", sec-began.Unix(), n, limit, tenth)
		if s := sec - began.Unix(); s >= 6 && s <= 7 {
			require.GreaterOrEqual(t, n, limit/2, "second %d, after the kill: the other instance serves every plane", s)
		}
	}
}
