package main

import (
	"sync"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/service"
)

// readiness is whether the service takes traffic: not once it drains, nor,
// with -healthy-needs-domain (envoyproxy/ratelimit's
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED), while the configuration in
// force has no domain. /readyz, /healthcheck and gRPC health (the server,
// the service by its full name and by envoyproxy/ratelimit's "ratelimit")
// answer it.
type readiness struct {
	svc        *service.Service
	needDomain bool
	grpc       *health.Server
	mu         sync.Mutex // orders the gRPC statuses set
	draining   bool
}

// healthNames are the gRPC health names the service answers for ("" is
// the server).
var healthNames = []string{"", rlsv3.RateLimitService_ServiceDesc.ServiceName, "ratelimit"}

func newReadiness(svc *service.Service, needDomain bool) *readiness {
	r := &readiness{svc: svc, needDomain: needDomain, grpc: health.NewServer()}
	r.update()
	return r
}

// ready reports whether the service takes traffic, and if not, why.
func (r *readiness) ready() (bool, string) {
	r.mu.Lock()
	draining := r.draining
	r.mu.Unlock()
	switch {
	case draining:
		return false, "draining"
	case r.needDomain && len(r.svc.Config().Domains()) == 0:
		return false, "no domain configured"
	}
	return true, ""
}

// update sets gRPC health from ready: after a configuration is applied.
func (r *readiness) update() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.draining {
		return // Shutdown made every name NOT_SERVING for good
	}
	st := healthpb.HealthCheckResponse_SERVING
	if r.needDomain && len(r.svc.Config().Domains()) == 0 {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	for _, name := range healthNames {
		r.grpc.SetServingStatus(name, st)
	}
}

// drain turns every probe to not ready, for good.
func (r *readiness) drain() {
	r.mu.Lock()
	r.draining = true
	r.mu.Unlock()
	r.grpc.Shutdown()
}
