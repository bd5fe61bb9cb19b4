package torture

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/node"
)

// LockSemRacy is a broken semaphore for the checker to catch: it counts the
// permits held (ZCARD), then adds its own in another round trip, so two
// callers that count at once both get in; and it never renews.
const LockSemRacy = "sem-racy"

// crowds is overlaps for a name of n permits: each hold b begins with the
// holds before it that still believed in theirs; n of them is the most the
// contract allows, unless a fault the contract admits (a pause past the
// lease, a restart without persistence, ...) excuses one. More is a
// violation that names them all.
func (c *checker) crowds(holds []Hold, n int) {
	counted := map[int]bool{}
	for j, b := range holds {
		if !c.believed(b) {
			continue
		}
		var inside []string
		for i, a := range holds[:j] {
			ea := c.end(a)
			if ea <= b.Got {
				continue
			}
			if why := c.excuse(a.Worker, a.Name, a.Got, ea, a.Got, b.Got); why != "" {
				if !counted[i] {
					c.v.Expected[why]++
					counted[i] = true
				}
				continue
			}
			inside = append(inside, c.who(a))
		}
		if len(inside) >= n {
			c.violate("%d holders of %d permits: %s got one while %s still believed in theirs%s",
				len(inside)+1, n, c.who(b), strings.Join(inside, ", "), c.near(b.Got))
		}
	}
}

// semRacy is LockSemRacy over rdb.
type semRacy struct {
	rdb       redis.UniversalClient
	prefix    string
	n         int
	ttl, wait time.Duration
}

type semRacyHold struct {
	s     *semRacy
	key   string
	token string
	fence int64
}

func (h *semRacyHold) Fence() int64             { return h.fence }
func (h *semRacyHold) Context() context.Context { return context.Background() }
func (h *semRacyHold) Release(ctx context.Context) error {
	n, err := h.s.rdb.ZRem(ctx, h.key, h.token).Result()
	if err == nil && n == 0 {
		return dlock.ErrNotHeld
	}
	return err
}

func (s *semRacy) Acquire(ctx context.Context, name string) (held, error) {
	key := node.KeysOf(s.prefix, name).Lock + ":racy" // in the slot of the name's lock
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	deadline := time.Now().Add(s.wait)
	for {
		now := time.Now().UnixMilli()
		s.rdb.ZRemRangeByScore(ctx, key, "-inf", fmt.Sprint(now))
		held, err := s.rdb.ZCard(ctx, key).Result()
		if err != nil {
			return nil, err
		}
		if held < int64(s.n) {
			// The bug: another caller may count and add in between.
			time.Sleep(2 * time.Millisecond)
			if err := s.rdb.ZAdd(ctx, key, redis.Z{Score: float64(now + s.ttl.Milliseconds()), Member: token}).Err(); err != nil {
				return nil, err
			}
			fence, err := s.rdb.Incr(ctx, key+":fence").Result()
			if err != nil {
				return nil, err
			}
			return &semRacyHold{s: s, key: key, token: token, fence: fence}, nil
		}
		if time.Now().After(deadline) {
			return nil, errBusy
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (s *semRacy) Close(context.Context) error { return nil }
