//go:build race

package ratelimit_test

const raceEnabled = true
