package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/scripts"
)

// manyMax bounds the locks of one RefreshMany call: Redis serves nobody
// else while a script runs, and 64 refreshes keep it to about 100 µs.
const manyMax = 64

// Merged is a pipeline's calls with the refreshes of exclusive locks sent
// together, manyMax to a RefreshMany call (Merge), and where each call's
// reply is among the merged calls' (Split).
type Merged struct {
	Calls []Call
	at    []place // per call given to Merge
}

// place is where one call given to Merge went: Calls[call], and for a
// refresh sent in a RefreshMany, its index in that call's reply (else -1).
type place struct{ call, elem int32 }

// Merge returns calls with their refreshes of exclusive locks made into
// RefreshMany calls, each holding what its refreshes held (key, token,
// ttl), the other calls left as they are. It is for one node's pipeline
// only: RefreshMany's keys need not share a slot.
func Merge(calls []Call) Merged {
	m := Merged{Calls: make([]Call, 0, len(calls)), at: make([]place, len(calls))}
	var group []int // the refreshes not yet sent in a RefreshMany
	flush := func() {
		if len(group) == 1 {
			// Alone, it goes as it is: a RefreshMany of one costs more.
			m.at[group[0]] = place{call: int32(len(m.Calls)), elem: -1}
			m.Calls = append(m.Calls, calls[group[0]])
			group = group[:0]
			return
		}
		args := make([]any, 3+3*len(group))
		args[0], args[1], args[2] = "evalsha", shaOf(scripts.RefreshMany), len(group)
		keys, argv := args[3:3+len(group)], args[3+len(group):]
		for k, i := range group {
			c := calls[i].args
			keys[k], argv[2*k], argv[2*k+1] = c[3], c[4], c[5]
			m.at[i] = place{call: int32(len(m.Calls)), elem: int32(k)}
		}
		m.Calls = append(m.Calls, Call{script: scripts.RefreshMany, args: args, nkeys: len(group)})
		group = group[:0]
	}
	for i, c := range calls {
		if !c.mergeable() {
			m.at[i] = place{call: int32(len(m.Calls)), elem: -1}
			m.Calls = append(m.Calls, c)
			continue
		}
		if group = append(group, i); len(group) == manyMax {
			flush()
		}
	}
	if len(group) > 0 {
		flush()
	}
	return m
}

// mergeable reports whether c is an exclusive lock's refresh (lockRefresh):
// one key, then the token and the ttl.
func (c Call) mergeable() bool {
	return c.script == scripts.Refresh && c.nkeys == 1 && len(c.args) == 6
}

// errManyReply answers the refreshes of a RefreshMany whose reply is not an
// array of one element per lock: never from a server running the script.
var errManyReply = errors.New("refresh_many: reply does not hold one answer per lock")

// Split returns, for the calls given to Merge, their replies out of
// replies, the merged calls' replies (Pipeline's). A refresh sent in a
// RefreshMany gets its own element: 1, 0, or its own error; a RefreshMany
// that failed as a whole (a connection error, a timeout) gives that error
// to each of its refreshes.
func (m Merged) Split(ctx context.Context, replies []Reply) []Reply {
	out := make([]Reply, len(m.at))
	for i, p := range m.at {
		r := replies[p.call]
		if p.elem < 0 || r.Cmd == nil || r.Err() != nil {
			out[i] = r
			continue
		}
		cmd := redis.NewCmd(ctx)
		if v, ok := r.Val().([]any); !ok || len(v) != m.Calls[p.call].nkeys {
			cmd.SetErr(fmt.Errorf("%w: %v", errManyReply, r.Val()))
		} else if err, ok := v[p.elem].(error); ok {
			cmd.SetErr(err)
		} else {
			cmd.SetVal(v[p.elem])
		}
		out[i] = Reply{Cmd: cmd, Sent: r.Sent}
	}
	return out
}
