package torture

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The protected resource lives in a Redis that no fault touches. It keeps a
// counter per lock name and the largest fence it has seen, and refuses a
// read or a write that presents a smaller one: a holder whose lease ran out
// cannot read before, nor write after, a later holder. Presenting the fence
// on the read too matters: a stale holder that read before the next holder
// wrote would otherwise write back an old value with a fence the resource
// has not yet seen beaten.
//
// Every access is appended to one list, in the order Redis applied them,
// for the checker's chain of values.
var resourceScript = redis.NewScript(`
local max = tonumber(redis.call('GET', KEYS[1]) or '0')
local fence = tonumber(ARGV[1])
local value = tonumber(redis.call('GET', KEYS[2]) or '0')
local ok = 1
if fence < max then
  ok = 0
else
  redis.call('SET', KEYS[1], ARGV[1])
  if ARGV[3] == 'write' then
    redis.call('SET', KEYS[2], tonumber(ARGV[5]) + 1)
  end
end
redis.call('RPUSH', KEYS[3], table.concat({ARGV[4], ARGV[2], ARGV[1], ARGV[3], ARGV[5], value, ok}, '|'))
return {ok, value}`)

// Resource is a client of the protected resource.
type Resource struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewResource uses rdb, keeping its keys under prefix.
func NewResource(rdb redis.UniversalClient, prefix string) *Resource {
	return &Resource{rdb: rdb, prefix: prefix}
}

func (r *Resource) keys(name string) []string {
	return []string{r.prefix + "max:" + name, r.prefix + "val:" + name, r.prefix + "log"}
}

// Read returns the counter of name, or "stale" if a larger fence was seen.
func (r *Resource) Read(ctx context.Context, worker int, name string, fence int64) (int64, string) {
	return r.access(ctx, worker, name, fence, "read", 0)
}

// Write sets the counter of name to read+1, unless a larger fence was seen.
func (r *Resource) Write(ctx context.Context, worker int, name string, fence, read int64) string {
	_, s := r.access(ctx, worker, name, fence, "write", read)
	return s
}

func (r *Resource) access(ctx context.Context, worker int, name string, fence int64, op string, read int64) (int64, string) {
	res, err := resourceScript.Run(ctx, r.rdb, r.keys(name), fence, worker, op, name, read).Int64Slice()
	switch {
	case err != nil || len(res) != 2:
		return 0, "err"
	case res[0] == 0:
		return 0, "stale"
	}
	return res[1], "ok"
}

// Accesses reads the log of every access, in order.
func (r *Resource) Accesses(ctx context.Context) ([]Access, error) {
	lines, err := r.rdb.LRange(ctx, r.prefix+"log", 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("torture: read the resource's log: %w", err)
	}
	out := make([]Access, 0, len(lines))
	for _, l := range lines {
		// name|worker|fence|op|read|value|ok; the name may hold '|'.
		f := strings.Split(l, "|")
		if len(f) < 7 {
			return nil, fmt.Errorf("torture: resource log entry %q", l)
		}
		n := len(f)
		a := Access{Name: strings.Join(f[:n-6], "|"), Op: f[n-4], OK: f[n-1] == "1"}
		a.Worker, _ = strconv.Atoi(f[n-6])
		a.Fence, _ = strconv.ParseInt(f[n-5], 10, 64)
		a.Read, _ = strconv.ParseInt(f[n-3], 10, 64)
		a.Value, _ = strconv.ParseInt(f[n-2], 10, 64)
		out = append(out, a)
	}
	return out, nil
}
