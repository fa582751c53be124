package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2conn is the load's client of a service: one HTTP/2 connection, over
// which each caller sends one gRPC unary ShouldRateLimit at a time, as
// Envoy's client does. grpc-go's client cost the load about as much CPU a
// request as ratelimitd itself, on the cores the services run on, and
// what the load spends only narrows every ratio; this client writes the
// frames a gRPC call is made of and reads the three a response is, with
// HTTP/2's flow control and HPACK (x/net/http2's framer and hpack), and
// nothing else. Both services are sent the same headers and messages.
//
// Writes are batched as grpc-go's are: callers put their frames in a
// buffer, and one goroutine writes it to the socket; the calls made while
// it writes go out together in its next write.
type h2conn struct {
	nc net.Conn

	wmu     sync.Mutex // guards out, fr's writes, enc, hbuf, nextID, sendWin
	out     swapWriter // what is to be written
	kick    chan struct{}
	closed  chan struct{} // closed when the connection fails
	once    sync.Once
	fr      *http2.Framer
	enc     *hpack.Encoder
	hbuf    bytes.Buffer
	nextID  uint32
	sendWin int64      // the connection's send window, in bytes
	winCond *sync.Cond // on wmu: sendWin grew, or the connection failed
	streams chan struct{}

	headers []hpack.HeaderField // each call's

	pmu     sync.Mutex // guards pending, err
	pending map[uint32]*h2call
	err     error
}

// h2call is one caller's call in flight; each caller reuses its own.
type h2call struct {
	done   chan struct{}
	data   []byte
	status string
	err    error
}

// initialWindow is what the load lets the service send before it reads:
// responses are read as they come, so flow control never holds one back.
const initialWindow = 1 << 30

// dialH2 connects to a gRPC server at addr (host:port, no TLS) and waits
// for its settings.
func dialH2(addr string) (*h2conn, error) {
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c := &h2conn{nc: nc, headers: callHeaders(addr), nextID: 1, sendWin: 65535,
		out: swapWriter{new(bytes.Buffer)}, kick: make(chan struct{}, 1), closed: make(chan struct{}), pending: map[uint32]*h2call{}}
	c.winCond = sync.NewCond(&c.wmu)
	c.fr = http2.NewFramer(&c.out, bufio.NewReaderSize(nc, 32<<10))
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.hbuf)
	c.out.b.WriteString(http2.ClientPreface)
	err = errors.Join(
		c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: initialWindow}),
		c.fr.WriteWindowUpdate(0, initialWindow-65535))
	if err == nil {
		_, err = nc.Write(c.out.b.Bytes())
		c.out.b.Reset()
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	// The server's settings come first: how many streams it allows.
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := c.fr.ReadFrame()
	_ = nc.SetReadDeadline(time.Time{})
	sf, ok := f.(*http2.SettingsFrame)
	if err != nil || !ok || sf.IsAck() {
		nc.Close()
		return nil, fmt.Errorf("bench: %s: no HTTP/2 settings first (%T, %v)", addr, f, err)
	}
	maxStreams := uint32(1 << 16)
	if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); ok {
		maxStreams = min(v, maxStreams)
	}
	c.streams = make(chan struct{}, maxStreams)
	if err := c.write(func() error { return c.fr.WriteSettingsAck() }); err != nil {
		nc.Close()
		return nil, err
	}
	go c.read()
	go c.flush()
	return c, nil
}

// newCall is a caller's call, reused from one call to the next.
func newCall() *h2call { return &h2call{done: make(chan struct{}, 1)} }

// call sends msg (a gRPC message: its 5-byte prefix and the encoded
// request) and returns the response's overall code.
func (c *h2conn) call(cl *h2call, msg []byte) (rlsv3.RateLimitResponse_Code, error) {
	c.streams <- struct{}{}
	defer func() { <-c.streams }()
	cl.data, cl.status, cl.err = cl.data[:0], "", nil
	c.wmu.Lock()
	for c.sendWin < int64(len(msg)) && !c.failed() {
		c.winCond.Wait() // what the buffer holds is being written: the window grows as the server reads it
	}
	id := c.nextID
	c.nextID += 2
	c.pmu.Lock()
	err := c.err
	sent := err == nil
	if sent {
		c.pending[id] = cl
	}
	c.pmu.Unlock()
	if sent {
		c.sendWin -= int64(len(msg))
		err = c.writeCall(id, msg)
	}
	c.wmu.Unlock()
	if err != nil {
		c.fail(err) // ends this call too, if it was sent
	} else {
		c.kicked()
	}
	if !sent {
		return 0, err
	}
	<-cl.done
	if cl.err != nil {
		return 0, cl.err
	}
	if cl.status != "0" {
		return 0, fmt.Errorf("bench: grpc-status %s", cl.status)
	}
	return overallCode(cl.data)
}

// writeCall writes a call's HEADERS and DATA (under wmu). Its headers are
// grpc-go's client's, HPACK-encoded on the connection's table as grpc-go
// encodes them: after the first call, mostly indexes.
func (c *h2conn) writeCall(id uint32, msg []byte) error {
	c.hbuf.Reset()
	for _, f := range c.headers {
		if err := c.enc.WriteField(f); err != nil {
			return err
		}
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true}); err != nil {
		return err
	}
	return c.fr.WriteData(id, true, msg)
}

// callHeaders are the headers of a call to addr: grpc-go's client's.
func callHeaders(addr string) []hpack.HeaderField {
	return []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: rlsv3.RateLimitService_ShouldRateLimit_FullMethodName},
		{Name: ":authority", Value: addr},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "user-agent", Value: "ratelimitd-bench"},
		{Name: "te", Value: "trailers"},
	}
}

// write runs w under wmu, and has what it wrote sent.
func (c *h2conn) write(w func() error) error {
	c.wmu.Lock()
	err := w()
	c.wmu.Unlock()
	c.kicked()
	return err
}

// kicked has the flusher write what the buffer holds.
func (c *h2conn) kicked() {
	select {
	case c.kick <- struct{}{}:
	default: // it is already to write again
	}
}

// flush writes what the calls put in the buffer, swapping it for an empty
// one under wmu and writing outside it, until the connection fails.
func (c *h2conn) flush() {
	spare := new(bytes.Buffer)
	for {
		select {
		case <-c.kick:
		case <-c.closed:
			return
		}
		c.wmu.Lock()
		spare, c.out.b = c.out.b, spare
		c.wmu.Unlock()
		if spare.Len() == 0 {
			continue
		}
		if _, err := c.nc.Write(spare.Bytes()); err != nil {
			c.fail(err)
			return
		}
		spare.Reset()
	}
}

// swapWriter is a buffer the flusher can swap out from under the framer.
type swapWriter struct{ b *bytes.Buffer }

func (w *swapWriter) Write(p []byte) (int, error) { return w.b.Write(p) }

// read reads the connection's frames until it fails, handing each call
// its response.
func (c *h2conn) read() {
	var unacked uint32 // bytes received and not yet given back to the window
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.fail(err)
			return
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() { // the trailers (or a trailers-only answer)
				c.finish(f.StreamID, f.PseudoValue("status"), f.Fields)
			}
		case *http2.DataFrame:
			c.pmu.Lock()
			if cl := c.pending[f.StreamID]; cl != nil {
				cl.data = append(cl.data, f.Data()...)
			}
			c.pmu.Unlock()
			if unacked += f.Length; unacked >= initialWindow/2 {
				err = c.write(func() error { return c.fr.WriteWindowUpdate(0, unacked) })
				unacked = 0
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				c.wmu.Lock()
				c.sendWin += int64(f.Increment)
				c.winCond.Broadcast()
				c.wmu.Unlock()
			}
		case *http2.SettingsFrame:
			if !f.IsAck() {
				err = c.write(func() error { return c.fr.WriteSettingsAck() })
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				err = c.write(func() error { return c.fr.WritePing(true, f.Data) })
			}
		case *http2.RSTStreamFrame:
			c.end(f.StreamID, fmt.Errorf("bench: stream reset: %v", f.ErrCode))
		case *http2.GoAwayFrame:
			err = fmt.Errorf("bench: GOAWAY: %v %s", f.ErrCode, f.DebugData())
		}
		if err != nil {
			c.fail(err)
			return
		}
	}
}

// finish ends a call on its trailers: grpc-status, and the response's
// HTTP status when it is not 200.
func (c *h2conn) finish(id uint32, httpStatus string, fields []hpack.HeaderField) {
	status := "missing"
	for _, f := range fields {
		if f.Name == "grpc-status" {
			status = f.Value
		}
	}
	c.pmu.Lock()
	cl := c.pending[id]
	delete(c.pending, id)
	c.pmu.Unlock()
	if cl == nil {
		return
	}
	if httpStatus != "" && httpStatus != "200" {
		status = "http " + httpStatus
	}
	cl.status = status
	cl.done <- struct{}{}
}

// end ends call id with err.
func (c *h2conn) end(id uint32, err error) {
	c.pmu.Lock()
	cl := c.pending[id]
	delete(c.pending, id)
	c.pmu.Unlock()
	if cl != nil {
		cl.err = err
		cl.done <- struct{}{}
	}
}

// fail ends every call in flight, and every later one, with err.
func (c *h2conn) fail(err error) {
	c.pmu.Lock()
	if c.err == nil {
		c.err = err
	}
	pending := c.pending
	c.pending = map[uint32]*h2call{}
	c.pmu.Unlock()
	for _, cl := range pending {
		cl.err = err
		cl.done <- struct{}{}
	}
	c.once.Do(func() {
		close(c.closed)
		c.nc.Close()
	})
	c.wmu.Lock()
	c.winCond.Broadcast()
	c.wmu.Unlock()
}

// failed reports whether the connection failed.
func (c *h2conn) failed() bool {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	return c.err != nil
}

// Close closes the connection; calls in flight fail.
func (c *h2conn) Close() error {
	c.fail(net.ErrClosed)
	return nil
}

// grpcMessage is msg as a gRPC message on the wire: uncompressed, its
// length, then msg.
func grpcMessage(msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// overallCode is the overall code of a response's gRPC message (its
// prefix, then the message).
func overallCode(b []byte) (rlsv3.RateLimitResponse_Code, error) {
	if len(b) < 5 || b[0] != 0 || int(binary.BigEndian.Uint32(b[1:5])) != len(b)-5 {
		return 0, fmt.Errorf("bench: a response's gRPC message is cut or compressed (%d bytes)", len(b))
	}
	var o overall
	if err := o.read(b[5:]); err != nil {
		return 0, err
	}
	return o.code, nil
}
