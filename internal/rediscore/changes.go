package rediscore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
)

// The channel of changes (see backend.Info's Changes): a Reset or a Refund is
// published on Channel as Change(prefix, key), and every listener publishes
// a heartbeat of its own every HeartbeatEvery; it hears every change while
// its own heartbeat comes back within HeartbeatLapse. One channel for every
// prefix: changes are rare (an operator's reset, a refund), and a listener
// keeps what concerns it.
const (
	Channel        = lua.Channel
	HeartbeatEvery = 500 * time.Millisecond
	HeartbeatLapse = 3 * HeartbeatEvery / 2
)

// Change is the message of a change to key under prefix (lua.News: the
// scripts publish the same).
func Change(prefix, key string) string { return lua.News(prefix, key) }

// heartbeatMark starts a heartbeat, which no Change does (a Change starts
// with a digit).
const heartbeatMark = "hb:"

// Listener follows the channel for one store: its client feeds it every
// message (Message) and says when the subscription broke (Lost), and it
// publishes the heartbeats (Run).
type Listener struct {
	changed   func(prefix, key string)
	heartbeat string
	heard     atomic.Int64 // when the heartbeat last came back, Unix ns; 0: not since the last loss
}

// NewListener calls changed for each change heard, and with two empty
// strings when some may have been missed.
func NewListener(changed func(prefix, key string)) *Listener {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Listener{changed: changed, heartbeat: heartbeatMark + hex.EncodeToString(b[:])}
}

// Message handles a message of the channel.
func (l *Listener) Message(payload string) {
	if payload == l.heartbeat {
		if l.heard.Swap(time.Now().UnixNano()) == 0 {
			l.changed("", "") // back: what happened meanwhile was missed
		}
		return
	}
	if strings.HasPrefix(payload, heartbeatMark) {
		return // another listener's
	}
	n, rest, ok := strings.Cut(payload, ":")
	size, err := strconv.Atoi(n)
	if !ok || err != nil || size < 0 || size > len(rest) {
		return
	}
	l.changed(rest[:size], rest[size:])
}

// Lost says the subscription broke: changes may be missed until the
// heartbeat comes back.
func (l *Listener) Lost() {
	if l.heard.Swap(0) != 0 {
		l.changed("", "")
	}
}

// Hearing reports whether every change is heard now: the heartbeat came
// back, and Run has not found it late since (it looks after every beat, so
// a lapse shows within HeartbeatLapse and a beat). One atomic load: a near
// cache asks on every answer, and a clock read there would cost what the
// cache saves.
func (l *Listener) Hearing() bool { return l.heard.Load() != 0 }

// Run publishes the heartbeat with publish every HeartbeatEvery until ctx is
// done (every HeartbeatEvery/25 while it has not come back, so that a new
// listener hears within moments), and calls Lost when it has not come back
// in time.
func (l *Listener) Run(ctx context.Context, publish func(ctx context.Context, payload string) error) {
	for {
		pctx, cancel := context.WithTimeout(ctx, HeartbeatEvery)
		_ = publish(pctx, l.heartbeat) // a failure shows as a heartbeat that does not come back
		cancel()
		every := HeartbeatEvery
		if l.heard.Load() == 0 {
			every = HeartbeatEvery / 25
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		if heard := l.heard.Load(); heard != 0 && time.Since(time.Unix(0, heard)) >= HeartbeatLapse {
			l.Lost()
		}
	}
}
