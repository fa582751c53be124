package conformance

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// The suite's checks, on plain testing: a backend author's tests need no
// assertion library. Each stops the scenario (t.Fatal) with what it saw and
// the scenario's message, as testify's require would; msgAndArgs is a
// format and its arguments, or nothing.

func failf(t testing.TB, what string, msgAndArgs []any) {
	t.Helper()
	if msg := message(msgAndArgs); msg != "" {
		t.Fatalf("%s\n%s", msg, what)
	}
	t.Fatal(what)
}

func message(msgAndArgs []any) string {
	if len(msgAndArgs) == 0 {
		return ""
	}
	if format, ok := msgAndArgs[0].(string); ok {
		return fmt.Sprintf(format, msgAndArgs[1:]...)
	}
	return fmt.Sprint(msgAndArgs...)
}

func mustEqual(t testing.TB, want, got any, msgAndArgs ...any) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		failf(t, fmt.Sprintf(" got: %+v\nwant: %+v", got, want), msgAndArgs)
	}
}

func mustNoError(t testing.TB, err error, msgAndArgs ...any) {
	t.Helper()
	if err != nil {
		failf(t, fmt.Sprintf("unexpected error: %v", err), msgAndArgs)
	}
}

func mustError(t testing.TB, err error, msgAndArgs ...any) {
	t.Helper()
	if err == nil {
		failf(t, "an error was expected, got none", msgAndArgs)
	}
}

func mustErrorIs(t testing.TB, err, target error, msgAndArgs ...any) {
	t.Helper()
	if !errors.Is(err, target) {
		failf(t, fmt.Sprintf("error %v does not wrap %v", err, target), msgAndArgs)
	}
}

func mustNotErrorIs(t testing.TB, err, target error, msgAndArgs ...any) {
	t.Helper()
	if errors.Is(err, target) {
		failf(t, fmt.Sprintf("error %v wraps %v", err, target), msgAndArgs)
	}
}

func mustTrue(t testing.TB, ok bool, msgAndArgs ...any) {
	t.Helper()
	if !ok {
		failf(t, "should be true", msgAndArgs)
	}
}

func mustFalse(t testing.TB, ok bool, msgAndArgs ...any) {
	t.Helper()
	if ok {
		failf(t, "should be false", msgAndArgs)
	}
}

func mustZero[T comparable](t testing.TB, v T, msgAndArgs ...any) {
	t.Helper()
	var zero T
	if v != zero {
		failf(t, fmt.Sprintf("should be zero, is %v", v), msgAndArgs)
	}
}

func mustPositive[T cmp.Ordered](t testing.TB, v T, msgAndArgs ...any) {
	t.Helper()
	var zero T
	if !(v > zero) {
		failf(t, fmt.Sprintf("should be positive, is %v", v), msgAndArgs)
	}
}

func mustLessOrEqual[T cmp.Ordered](t testing.TB, v, bound T, msgAndArgs ...any) {
	t.Helper()
	if !(v <= bound) {
		failf(t, fmt.Sprintf("%v is over %v", v, bound), msgAndArgs)
	}
}

func mustGreaterOrEqual[T cmp.Ordered](t testing.TB, v, bound T, msgAndArgs ...any) {
	t.Helper()
	if !(v >= bound) {
		failf(t, fmt.Sprintf("%v is under %v", v, bound), msgAndArgs)
	}
}

func mustLen(t testing.TB, v any, n int, msgAndArgs ...any) {
	t.Helper()
	if l := reflect.ValueOf(v).Len(); l != n {
		failf(t, fmt.Sprintf("has %d items, want %d: %+v", l, n, v), msgAndArgs)
	}
}

// mustDecide fails unless got is the model's want, naming each field that
// differs with the rule it breaks (see package algorithm for the rules).
func mustDecide(t testing.TB, want, got ratelimit.Decision, msgAndArgs ...any) {
	t.Helper()
	if reflect.DeepEqual(want, got) {
		return
	}
	var b strings.Builder
	field := func(name string, differ bool, w, g any, rule string) {
		if differ {
			fmt.Fprintf(&b, "\n%s: got %v, want %v: %s", name, g, w, rule)
		}
	}
	field("Allowed", want.Allowed != got.Allowed, want.Allowed, got.Allowed, "a request is admitted iff its cost fits in the limit less the count")
	field("Limit", want.Limit != got.Limit, want.Limit, got.Limit, "the policy's MaxCost: its limit, or GCRA's burst")
	field("Count", want.Count != got.Count, want.Count, got.Count, "what the window holds after the decision (GCRA: the requests' worth in the bucket)")
	field("Remaining", want.Remaining != got.Remaining, want.Remaining, got.Remaining, "the limit less the count, never negative")
	field("RetryAfter", want.RetryAfter != got.RetryAfter, want.RetryAfter, got.RetryAfter, "0 when admitted; else exactly when the request would fit, should nothing else be admitted")
	field("ResetAt", !want.ResetAt.Equal(got.ResetAt), want.ResetAt.Format(time.StampMicro), got.ResetAt.Format(time.StampMicro), "when the count next drops (the oldest entry leaves, the window ends, the bucket drains a request)")
	field("At", !want.At.Equal(got.At), want.At.Format(time.StampMicro), got.At.Format(time.StampMicro), "the decision's time: the request's on the caller's clock")
	if b.Len() == 0 { // equal instants, other representations
		b.WriteString("\nthe times are equal instants but not as time.UnixMicro makes them (the local zone, no monotonic reading)")
	}
	failf(t, "the decision differs from the model's:"+b.String(), msgAndArgs)
}
