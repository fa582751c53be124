package service

import (
	"io"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// JSON serves envoyproxy/ratelimit's /json: Envoy's RateLimitRequest in its
// JSON form, answered with the RateLimitResponse in JSON, 200, or 429 when
// over the limit. A body that is not one is 400; the errors of
// ShouldRateLimit take the HTTP form of their gRPC code (400, 404, 503).
func (r *RLS) JSON(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST a RateLimitRequest", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		http.Error(w, "bad request: the body could not be read, or is over 1 MiB", http.StatusBadRequest)
		return
	}
	var in rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &in); err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	out, err := r.ShouldRateLimit(req.Context(), &in)
	if err != nil {
		code := http.StatusInternalServerError
		switch status.Code(err) {
		case codes.InvalidArgument:
			code = http.StatusBadRequest
		case codes.NotFound:
			code = http.StatusNotFound
		case codes.Unavailable:
			code = http.StatusServiceUnavailable
		}
		http.Error(w, status.Convert(err).Message(), code)
		return
	}
	reply, err := protojson.Marshal(out)
	if err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if out.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	_, _ = w.Write(reply)
}
