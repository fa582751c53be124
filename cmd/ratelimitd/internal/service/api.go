package service

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/ratelimit-go/ratelimit/cmd/ratelimitd/internal/config"
)

// AllowRequest is the body of POST /v1/allow: a domain and either
// descriptors, as Envoy sends them, or a plain key, which is the descriptor
// [{"key": "key", "value": KEY}] (configure it as a rule on the key "key").
// Cost is the request's cost (default 1).
type AllowRequest struct {
	Domain      string `json:"domain"`
	Key         string `json:"key,omitempty"`
	Descriptors []struct {
		Entries []config.Entry `json:"entries"`
		Cost    *int64         `json:"cost,omitempty"` // set: usage, recorded whatever the quota; 0 a check
	} `json:"descriptors,omitempty"`
	Cost int64 `json:"cost,omitempty"`
}

// AllowResponse answers POST /v1/allow. The top-level fields are the
// deciding limit's (when denied, the one denying longest; when admitted, the
// one with the fewest requests left), all durations in milliseconds:
// allowed, currentCount and ttl (until the count resets) as the reference
// document's service answers, then the library's decision.
type AllowResponse struct {
	Allowed      bool           `json:"allowed"`
	CurrentCount int            `json:"currentCount"`
	TTL          int64          `json:"ttl"`
	Limit        int            `json:"limit"`
	Remaining    int            `json:"remaining"`
	RetryAfter   int64          `json:"retryAfter"`
	ResetAt      *time.Time     `json:"resetAt,omitempty"`
	Statuses     []StatusAnswer `json:"statuses"`
}

// StatusAnswer is one descriptor's outcome in AllowResponse.
type StatusAnswer struct {
	Code       string `json:"code"` // "OK" or "OVER_LIMIT"
	Name       string `json:"name,omitempty"`
	Limited    bool   `json:"limited"`
	Shadowed   bool   `json:"shadowed,omitempty"`
	Limit      int    `json:"limit"`
	Remaining  int    `json:"remaining"`
	Count      int    `json:"count"`
	TTL        int64  `json:"ttl"`
	RetryAfter int64  `json:"retryAfter"`
}

// maxBody bounds a /v1/allow body.
const maxBody = 1 << 20

// Allow is the handler of POST /v1/allow: 200 with the decision (allowed
// or not, and the RateLimit headers), 400 for a bad request, 404 for an
// unknown domain, 503 when the store cannot answer.
func (s *Service) Allow(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST a JSON body", http.StatusMethodNotAllowed)
		return
	}
	var in AllowRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	req, err := in.request()
	if err == nil {
		var res Result
		if res, err = s.Decide(r.Context(), req); err == nil {
			for _, h := range Headers(res) {
				w.Header().Set(h.Name, h.Value)
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(answer(res))
			return
		}
	}
	switch {
	case errors.Is(err, ErrBadRequest):
		http.Error(w, err.Error(), http.StatusBadRequest)
	case errors.Is(err, ErrUnknownDomain):
		http.Error(w, err.Error(), http.StatusNotFound)
	default: // the store's error may name internal addresses: not for clients
		http.Error(w, "rate limit: the store cannot answer", http.StatusServiceUnavailable)
	}
}

func (in AllowRequest) request() (Request, error) {
	if in.Cost < 0 {
		return Request{}, fmt.Errorf("%w: negative cost %d", ErrBadRequest, in.Cost)
	}
	req := Request{Domain: in.Domain, Cost: uint64(in.Cost)}
	if in.Key != "" {
		if len(in.Descriptors) > 0 {
			return Request{}, fmt.Errorf("%w: give a key or descriptors, not both", ErrBadRequest)
		}
		req.Descriptors = []Descriptor{{Entries: []config.Entry{{Key: "key", Value: in.Key}}}}
	}
	for i, d := range in.Descriptors {
		desc := Descriptor{Entries: d.Entries}
		if d.Cost != nil {
			if *d.Cost < 0 {
				return Request{}, fmt.Errorf("%w: descriptor %d: negative cost %d", ErrBadRequest, i, *d.Cost)
			}
			cost := uint64(*d.Cost)
			desc.Cost = &cost
		}
		req.Descriptors = append(req.Descriptors, desc)
	}
	return req, nil
}

func answer(res Result) AllowResponse {
	out := AllowResponse{Allowed: !res.OverLimit, Statuses: make([]StatusAnswer, len(res.Statuses))}
	deciding := -1
	for i, st := range res.Statuses {
		a := StatusAnswer{Code: "OK", Name: st.Name, Limited: st.Rule != nil && !st.Rule.Unlimited, Shadowed: st.Shadowed}
		if st.OverLimit {
			a.Code = "OVER_LIMIT"
		}
		if st.Asked() {
			d := st.Decision
			a.Limit, a.Remaining, a.Count = d.Limit, d.Remaining, d.Count
			a.TTL, a.RetryAfter = d.ResetAt.Sub(d.At).Milliseconds(), d.RetryAfter.Milliseconds()
			if st.Rule.Shadow {
				a.RetryAfter = 0
			} else if deciding < 0 || decides(st, res.Statuses[deciding], res.OverLimit) {
				deciding = i
			}
		}
		out.Statuses[i] = a
	}
	if deciding >= 0 {
		a, d := out.Statuses[deciding], res.Statuses[deciding].Decision
		out.CurrentCount, out.TTL, out.Limit, out.Remaining, out.RetryAfter = a.Count, a.TTL, a.Limit, a.Remaining, a.RetryAfter
		out.ResetAt = &d.ResetAt
	}
	return out
}

// decides reports whether st is stricter than the deciding status so far.
func decides(st, so Status, overLimit bool) bool {
	if overLimit {
		return st.OverLimit && (!so.OverLimit || st.Decision.RetryAfter > so.Decision.RetryAfter)
	}
	return st.Decision.Remaining < so.Decision.Remaining
}
