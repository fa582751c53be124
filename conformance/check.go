package conformance

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"testing"
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
