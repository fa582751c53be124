package testserver

import (
	"bytes"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Gate is a TCP proxy to a server whose replies can be held back: what a
// client sends passes at once, what the server answers waits at the gate
// while it is held. A test orders events with it that a slow network
// orders by chance (a reply overtaken by a message on another connection),
// without depending on how slow anything is.
type Gate struct {
	// Addr is the proxy's address: a client connects there instead.
	Addr string

	mu      sync.Mutex
	open    chan struct{} // closed while the gate is open
	waiting chan struct{} // closed once a reply waits at the held gate
	// conns are the connections passing now (both sides), for Break.
	conns []net.Conn
}

// NewGate starts a gate to the server at target, open, stopped when t ends.
func NewGate(t testing.TB, target string) *Gate {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("a gate to %s: %v", target, err)
	}
	g := &Gate{Addr: l.Addr().String(), open: make(chan struct{}), waiting: make(chan struct{})}
	close(g.open)
	done := false
	t.Cleanup(func() {
		_ = l.Close()
		g.Release()
		g.mu.Lock()
		done = true
		g.mu.Unlock()
		g.Break()
	})
	go func() {
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			g.mu.Lock()
			if done {
				g.mu.Unlock()
				_ = client.Close()
				_ = server.Close()
				return
			}
			g.conns = append(g.conns, client, server)
			g.mu.Unlock()
			go func() { _, _ = io.Copy(server, client); _ = server.Close() }()
			go g.replies(client, server)
		}
	}()
	return g
}

// replies copies what server answers to client, waiting at the gate.
func (g *Gate) replies(client, server net.Conn) {
	defer client.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			g.pass(decisionReply(buf[:n]))
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// decisionReply says whether replies, as one read returned them, hold a
// decision's: a bulk string (one request's, packed) or an array of
// integers (several's). A store's reading of the server's clock answers an
// array of bulk strings (TIME), which is no decision's, and a client that
// pipelines (valkey-go) may have it read with a decision's, either first.
// A reply cut short at the read's end is taken as a decision's by its
// start.
func decisionReply(replies []byte) bool {
	for i := 0; i < len(replies); {
		switch replies[i] {
		case '$':
			return true
		case '*':
			line := bytes.IndexByte(replies[i:], '\n')
			if line < 0 || i+line+1 >= len(replies) || replies[i+line+1] == ':' {
				return true
			}
		}
		next, ok := skipReply(replies, i)
		if !ok {
			return false
		}
		i = next
	}
	return false
}

// skipReply returns where the RESP reply at b[i:] ends, or false when b
// ends first or holds no reply there.
func skipReply(b []byte, i int) (int, bool) {
	line := bytes.IndexByte(b[i:], '\n')
	if line < 1 {
		return 0, false
	}
	end := i + line + 1
	n, err := strconv.Atoi(strings.TrimSpace(string(b[i+1 : end])))
	switch b[i] {
	case '$', '=', '!': // bulk: its length, then the bytes and CRLF
		if err != nil || n < 0 {
			return end, err == nil
		}
		return end + n + 2, end+n+2 <= len(b)
	case '*', '~', '>', '%', '|': // aggregates: n elements (pairs for maps)
		if err != nil || n < 0 {
			return end, err == nil
		}
		if b[i] == '%' || b[i] == '|' {
			n *= 2
		}
		for ; n > 0; n-- {
			var ok bool
			if end, ok = skipReply(b, end); !ok {
				return 0, false
			}
		}
		return end, true
	default: // a line: status, error, integer, null, double, boolean, big number
		return end, true
	}
}

// pass returns once the gate is open, saying it waits while it is not;
// a reply that is no decision's passes.
func (g *Gate) pass(decision bool) {
	g.mu.Lock()
	open, waiting := g.open, g.waiting
	select {
	case <-open:
	default:
		if !decision {
			g.mu.Unlock()
			return
		}
		select {
		case <-waiting:
		default:
			close(waiting)
		}
	}
	g.mu.Unlock()
	<-open
}

// HoldDecisions holds, from now until Release, every reply that is a
// decision's (decisionReply) and what follows it on its connection; the
// rest passes: a store's reading of the server's clock, a new
// connection's handshake (a map), a client's keep-alive PING, an error, a
// push. A test that waits for a decision's reply must not be told of
// those (valkey-go opens a connection and pings on its own). The reply's
// kind is read from the first byte one read returns.
func (g *Gate) HoldDecisions() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open, g.waiting = make(chan struct{}), make(chan struct{})
	default: // held already
	}
}

// Waiting is closed once a reply waits at the gate held by the last
// HoldDecisions.
func (g *Gate) Waiting() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

// Break closes every connection passing now, both sides, as a network
// that fails does: a reply held at the gate is lost, and the client sees
// its connection end after it sent its command. Later connections pass.
func (g *Gate) Break() {
	g.mu.Lock()
	conns := g.conns
	g.conns = nil
	g.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// Release lets every held reply through, in order, and the next ones at
// once.
func (g *Gate) Release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}
