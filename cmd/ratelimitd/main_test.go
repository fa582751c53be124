package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestAPanicInAHandlerIsAnInternalError(t *testing.T) {
	var logs strings.Builder
	intercept := recovered(slog.New(slog.NewTextHandler(&logs, nil)))
	_, err := intercept(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/x/Y"}, func(context.Context, any) (any, error) {
		panic("boom")
	})
	assert.Equal(t, codes.Internal, status.Code(err))
	assert.Contains(t, logs.String(), "boom")
}

// A stream's handler too (the Rate Limit Quota Service's): a panic ends
// its stream Internal, and the process serves on.
func TestAPanicInAStreamHandlerIsAnInternalError(t *testing.T) {
	var logs strings.Builder
	intercept := recoveredStream(slog.New(slog.NewTextHandler(&logs, nil)))
	err := intercept(nil, nil, &grpc.StreamServerInfo{FullMethod: "/x/Stream"}, func(any, grpc.ServerStream) error {
		panic("boom")
	})
	assert.Equal(t, codes.Internal, status.Code(err))
	assert.Contains(t, logs.String(), "boom")
}
