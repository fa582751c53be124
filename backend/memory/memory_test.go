package memory_test

import (
	"testing"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/memory"
	"github.com/ratelimit-go/ratelimit/conformance"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.InProcess(func(t *testing.T) ratelimit.Store {
		s, err := memory.New()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}))
}
