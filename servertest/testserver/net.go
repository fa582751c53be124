package testserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// freePorts picks n distinct loopback ports that are free now; lowFirst
// asks for a first one of 55,535 or less.
func freePorts(n int, lowFirst bool) ([]int, error) {
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close() // held until all are picked: distinct
		port := l.Addr().(*net.TCPAddr).Port
		if len(ports) == 0 && lowFirst && port > 55535 {
			if tries > 100 {
				return nil, errors.New("no free port of 55,535 or less")
			}
			continue
		}
		ports = append(ports, port)
	}
	return ports, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// waitReady pings addr until it answers PONG or ctx is done.
func waitReady(ctx context.Context, addr string) error {
	var last error
	for ctx.Err() == nil {
		if last = ping(ctx, addr); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("server at %s not ready: %w", addr, last)
}

func ping(ctx context.Context, addr string) error {
	reply, err := command(ctx, addr, "PING")
	if err == nil && reply != "PONG" {
		err = fmt.Errorf("PING answered %q", reply)
	}
	return err
}

// command sends one command on a new connection and returns its reply: a
// simple or bulk string (an error reply is an error). Enough for the few
// commands that set a server up, without a client library.
func command(ctx context.Context, addr string, args ...string) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	req := fmt.Sprintf("*%d\r\n", len(args))
	for _, a := range args {
		req += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(req)); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	switch {
	case strings.HasPrefix(line, "+"):
		return line[1:], nil
	case strings.HasPrefix(line, "$"):
		var n int
		if _, err := fmt.Sscanf(line, "$%d", &n); err != nil || n < 0 {
			return "", fmt.Errorf("%s: reply %q", args[0], line)
		}
		body := make([]byte, n+2)
		_, err := io.ReadFull(r, body)
		return string(body[:n]), err
	}
	return "", fmt.Errorf("%s: reply %q", args[0], line)
}
