package redistest

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// ReadOnlyOnResend is go-redis' retry after a lost reply, made visible, as
// a redis.Hook: once Armed, the next acquire script (EVALSHA or EVAL of 7
// keys and 8 arguments) runs on the server (it grants), its reply is lost,
// and the command is sent again to a server that meanwhile turned
// read-only (a replica for a moment, its primary unreachable, so it keeps
// its data). The real answer is a READONLY error reply, which go-redis
// returns although the first try granted. Admin is a client of the same
// server that is not hooked; Err keeps the re-send's answer.
type ReadOnlyOnResend struct {
	Armed atomic.Bool
	Admin *redis.Client
	Err   atomic.Value
}

func (h *ReadOnlyOnResend) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *ReadOnlyOnResend) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *ReadOnlyOnResend) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		if !(len(a) == 18 && (a[0] == "evalsha" || a[0] == "eval") && fmt.Sprint(a[2]) == "7" && h.Armed.CompareAndSwap(true, false)) {
			return next(ctx, cmd)
		}
		if err := next(ctx, cmd); err != nil {
			return err
		}
		h.Admin.ReplicaOf(ctx, "127.0.0.1", "1") // demoted, its primary unreachable: it keeps its data
		err := next(ctx, cmd)                    // the re-send
		h.Admin.ReplicaOf(ctx, "NO", "ONE")
		if err != nil {
			h.Err.Store(err)
		}
		return err
	}
}
