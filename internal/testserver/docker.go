package testserver

import (
	"errors"
	"fmt"
	"time"

	"github.com/ory/dockertest/v3"
)

// startContainer runs image on a Docker engine, if one answers.
func startContainer(image string) (*Server, error) {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	if err := pool.Client.Ping(); err != nil {
		return nil, fmt.Errorf("no Docker engine answers: %w", err)
	}
	res, err := pool.Run(image, "latest", nil)
	if err != nil {
		return nil, fmt.Errorf("docker run %s: %w", image, err)
	}
	_ = res.Expire(600) // a crashed test run leaves nothing behind for long
	addr := "127.0.0.1:" + res.GetPort("6379/tcp")
	if err := waitReady(addr, 30*time.Second); err != nil {
		return nil, errors.Join(err, pool.Purge(res))
	}
	return &Server{Addr: addr, Origin: "docker " + image, stop: func() { _ = pool.Purge(res) }}, nil
}
