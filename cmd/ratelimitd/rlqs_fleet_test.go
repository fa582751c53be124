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

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/rlqs/rlqstest"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

// livePlane is a data plane in real time (rlqstest.Plane), with the
// demand a test sets while runFleet runs it.
type livePlane struct {
	*rlqstest.Plane
	mu     sync.Mutex
	demand float64 // requests a second
}

// newLivePlane is a plane of bucket tenant=acme in domain fleet on stream.
func newLivePlane(stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient, demand float64) *livePlane {
	return &livePlane{Plane: &rlqstest.Plane{Stream: stream, Domain: "fleet", Bucket: &rlqsv3.BucketId{Bucket: map[string]string{"tenant": "acme"}}}, demand: demand}
}

// runFleet runs each plane of fleet every interval until ctx ends: it
// serves the requests since its last turn, reports them (on an error, once
// more on the stream reconnect gives, if it gives one) and tells what it
// admitted, its bucket's size and the reports it sent. wait waits for
// them and returns the first error.
func runFleet(ctx context.Context, fleet []*livePlane, interval time.Duration,
	reconnect func(i int) rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient,
	tell func(i int, now time.Time, admitted []time.Time, size, sent int)) (wait func() error) {
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
					admitted := p.Serve(last, now, p.demand)
					size := p.Size()
					sent, err := p.Report(now.Sub(last))
					if err != nil && ctx.Err() == nil {
						if s := reconnect(i); s != nil {
							p.Stream = s
							var more int
							more, err = p.Report(now.Sub(last))
							sent += more
						}
					}
					p.mu.Unlock()
					last = now
					if err != nil && ctx.Err() == nil {
						errs <- err
						return
					}
					tell(i, now, admitted, size, sent)
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
	cfg := writeConfig(t, filepath.Join(t.TempDir(), "fleet.yaml"), fleetRules)
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
		fleet[i] = newLivePlane(connect(instances[i%2]), 0)
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
	}, func(i int, now time.Time, admitted []time.Time, size, _ int) {
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
