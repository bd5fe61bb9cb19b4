package dlock_test

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// replyGate holds back the reply of the first commands (alone or in a
// pipeline) whose arguments contain match, after Redis has run them (a
// NOSCRIPT answer does not count): the
// caller reads its reply only once the gate opens. Held is closed when the
// first such reply is held. It forces "the command ran, its reply is still
// on the way" at a point the test chooses.
type replyGate struct {
	match string
	times int // how many commands to hold; 1 if 0
	// pipelines: hold only replies of pipelines (the renewal loop's),
	// not of commands sent alone.
	pipelines bool

	mu    sync.Mutex
	seen  int
	held  chan struct{}
	open  chan struct{}
	close sync.Once
}

func newReplyGate(match string, times int) *replyGate {
	return &replyGate{match: match, times: max(times, 1), held: make(chan struct{}), open: make(chan struct{})}
}

// release lets the held replies through, and every later one.
func (g *replyGate) release() { g.close.Do(func() { close(g.open) }) }

func (g *replyGate) take(err error, cmds ...redis.Cmder) bool {
	for _, cmd := range cmds {
		// A script's first run may be answered NOSCRIPT: it ran nothing,
		// and the command sent next is the one that runs. (A hook sees
		// the error of a lone command in next's result, not yet in cmd.)
		if e := cmp.Or(cmd.Err(), err); e != nil && strings.HasPrefix(e.Error(), "NOSCRIPT") {
			continue
		}
		if strings.Contains(fmt.Sprint(cmd.Args()...), g.match) {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.seen >= g.times {
				return false
			}
			g.seen++
			if g.seen == 1 {
				close(g.held)
			}
			return true
		}
	}
	return false
}

func (g *replyGate) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (g *replyGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if !g.pipelines && g.take(err, cmd) {
			<-g.open
		}
		return err
	}
}

func (g *replyGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if g.take(nil, cmds...) {
			<-g.open
		}
		return err
	}
}
