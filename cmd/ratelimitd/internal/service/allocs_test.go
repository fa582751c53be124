package service

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// oneRuleEach is a configuration of n rules of 1 request an hour, on the
// descriptor keys d0 to dn-1 of domain bench.
func oneRuleEach(n int) string {
	var yaml strings.Builder
	yaml.WriteString("domain: bench\ndescriptors:\n")
	for i := range n {
		fmt.Fprintf(&yaml, "  - key: d%d\n    rate_limit: {unit: hour, requests_per_unit: 1}\n", i)
	}
	return yaml.String()
}

// eachRule is a request of n descriptors, one under each of oneRuleEach's
// rules, all of value v.
func eachRule(n int, v string) Request {
	req := Request{Domain: "bench"}
	for i := range n {
		req.Descriptors = append(req.Descriptors, desc(fmt.Sprintf("d%d", i), v))
	}
	return req
}

// decideAllocs is what a Decide of n descriptors, each under a rule of its
// own and denied, allocates on the memory store.
func decideAllocs(t *testing.T, n int) float64 {
	req := eachRule(n, "v")
	svc, _ := newService(t, oneRuleEach(n))
	ctx := context.Background()
	for range 2 { // the keys exist, and are over their limits
		_, err := svc.Decide(ctx, req)
		require.NoError(t, err)
	}
	return testing.AllocsPerRun(500, func() { _, _ = svc.Decide(ctx, req) })
}

// A Decide of three descriptors, all denied, allocates 11 times: the
// context, the statuses, three keys and the limiters here; the Multi, its
// requests, outcomes, decisions and policies in the library. The checks,
// the enforced list and the Multi's keys are on the stack (15 when each
// was made on the heap and an undo was made for every admission, whether
// or not a quota pool could call it; 20 before that). A descriptor more
// adds its key alone.
func TestADecideOfThreeDescriptorsAllocatesElevenTimes(t *testing.T) {
	three, four := decideAllocs(t, 3), decideAllocs(t, 4)
	t.Logf("allocations a Decide: %v of three descriptors, %v of four", three, four)
	require.LessOrEqual(t, three, 11.0)
	require.Equal(t, three+1, four)
}
