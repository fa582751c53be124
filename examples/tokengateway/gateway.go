package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

// Budgets are a user's limits: requests per minute, and tokens per minute
// and per day.
type Budgets struct {
	RequestsPerMinute int
	TokensPerMinute   int // at most ratelimit.MaxLogLimit: a sliding log, exact
	TokensPerDay      int
}

// Defaults are the budgets of the command.
var Defaults = Budgets{RequestsPerMinute: 60, TokensPerMinute: 10_000, TokensPerDay: 1_000_000}

// Gateway limits each user's calls to model, on store, which every instance
// of the gateway shares (Redis: the budgets hold across instances).
//
// A request says who it is for (X-User) and the most tokens its answer may
// use (max_tokens, as an LLM's API takes it), beside its prompt. Before the
// model runs, the gateway reserves what the request may use at most, the
// prompt's tokens and max_tokens (denied, 429, when the reservation does
// not fit); once the model has answered, the handler reports what it used
// (httplimit.ReportUsage) and the middleware settles: what was reserved
// and not used is given back to that admission. So k requests of one user
// in flight never take the budget past its limit, however long they run: a
// model that keeps to max_tokens never uses more than was reserved. (A
// check before and a charge after, with no reservation, would let k
// requests in flight pass it by up to k answers.)
func Gateway(store backend.Store, b Budgets, model http.Handler) (http.Handler, error) {
	return gateway(store, b, model, true)
}

// gateway is Gateway, reserving before the model runs or, with reserve
// false, only checking the budgets then (their test measures both).
func gateway(store backend.Store, b Budgets, model http.Handler, reserve bool) (http.Handler, error) {
	requests, err := ratelimit.New(store, ratelimit.TokenBucket(b.RequestsPerMinute, time.Minute, max(b.RequestsPerMinute/6, 1)),
		ratelimit.WithPrefix("gw:rpm:"), ratelimit.WithName("requests-per-minute"))
	if err != nil {
		return nil, err
	}
	perMinute, err := ratelimit.New(store, ratelimit.NewPolicy(ratelimit.SlidingWindow, b.TokensPerMinute, time.Minute),
		ratelimit.WithPrefix("gw:tpm:"), ratelimit.WithName("tokens-per-minute"))
	if err != nil {
		return nil, err
	}
	perDay, err := ratelimit.New(store, ratelimit.NewPolicy(ratelimit.FixedWindow, b.TokensPerDay, 24*time.Hour),
		ratelimit.WithPrefix("gw:tpd:"), ratelimit.WithName("tokens-per-day"))
	if err != nil {
		return nil, err
	}
	user, cost := httplimit.Header("X-User"), mostTokens
	if !reserve {
		cost = nil // a Usage rule's default: a check
	}
	m, err := httplimit.New([]httplimit.Rule{
		{Limiter: requests, Key: user},
		{Limiter: perMinute, Key: user, Cost: cost, Usage: true},
		{Limiter: perDay, Key: user, Cost: cost, Usage: true},
	})
	if err != nil {
		return nil, err
	}
	return m.Handler(model), nil
}

// mostTokens is the most a request may use: its prompt's tokens (here its
// length in bytes over 4, a tokenizer's rough count) and max_tokens.
func mostTokens(r *http.Request) (int, error) {
	most, err := strconv.Atoi(r.URL.Query().Get("max_tokens"))
	if err != nil || most < 1 {
		return 0, fmt.Errorf("max_tokens: want a positive number: %w", ratelimit.ErrInvalidCost) // 400
	}
	return promptTokens(r) + most, nil
}

func promptTokens(r *http.Request) int { return (int(r.ContentLength) + 3) / 4 }

// Usage is the part of a model's answer that says what it used, as the
// usual LLM APIs return it.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Reporting wraps a model's handler: it reports the answer's tokens to the
// gateway (httplimit.ReportUsage), read from the usage the model returns in
// the X-Usage-Total-Tokens header (a proxy to a real model reads them from
// the answer's body).
func Reporting(model http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &usageWriter{ResponseWriter: w}
		model.ServeHTTP(rec, r)
		httplimit.ReportUsage(r.Context(), rec.total)
	})
}

// usageWriter reads the total tokens from the model's header as it writes.
type usageWriter struct {
	http.ResponseWriter
	total int
	wrote bool
}

func (u *usageWriter) WriteHeader(code int) {
	if !u.wrote {
		u.total, _ = strconv.Atoi(u.Header().Get("X-Usage-Total-Tokens"))
		u.wrote = true
	}
	u.ResponseWriter.WriteHeader(code)
}

func (u *usageWriter) Write(b []byte) (int, error) {
	if !u.wrote {
		u.WriteHeader(http.StatusOK)
	}
	return u.ResponseWriter.Write(b)
}

// StandIn is a model that answers with made-up text of up to max_tokens
// tokens (as many as tokens says, capped), and says what it used.
func StandIn(tokens func(most int) int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		most, _ := strconv.Atoi(r.URL.Query().Get("max_tokens"))
		u := Usage{PromptTokens: promptTokens(r), CompletionTokens: min(tokens(most), most)}
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Usage-Total-Tokens", strconv.Itoa(u.TotalTokens))
		w.WriteHeader(http.StatusOK)
		_ = json.NewEncoder(w).Encode(map[string]any{"text": "...", "usage": u})
	})
}
