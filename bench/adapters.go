package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// locker is the one interface every library is driven through, so the
// scenario code is identical for all of them and measures only what the
// library does. An adapter must not add waiting or retries of its own
// beyond what the library does (the raw baseline is the exception: it *is*
// the hand-written retry loop).
type locker interface {
	// Acquire waits, with the library's own waiting strategy, until the
	// lock is held. It returns ctx's error when ctx ends first, and
	// errNotObtained when the library itself gives up.
	Acquire(ctx context.Context, name string) (releaseFunc, error)
	// TryAcquire makes a single attempt and returns errNotObtained if the
	// lock is held by someone else.
	TryAcquire(ctx context.Context, name string) (releaseFunc, error)
}

// releaseFunc releases a held lock. It returns errLost when the library
// reports the lock was no longer ours (expired or taken over).
type releaseFunc func(ctx context.Context) error

var (
	errNotObtained = errors.New("lock not obtained")
	errLost        = errors.New("lock no longer held at release")
)

// layout says how the goroutines of one cell reach Redis.
type layout string

const (
	// shared: one library client (one connection pool) for all goroutines,
	// as goroutines inside one process would share it.
	shared layout = "shared"
	// separate: one client with its own connection(s) per goroutine, as
	// separate processes would have. Libraries that coordinate waiters
	// in-process (rueidislock) cannot do so here.
	separate layout = "separate"
)

// cellEnv is what an adapter needs to build its lockers for one cell.
type cellEnv struct {
	addr string
	cfg  *config
	rt   *roundTrips // every client built for the cell counts into this
}

// library is one contender in the benchmark.
type library struct {
	name  string
	order int // position in tables and in the default -libs list
	// optional libraries run only when named in -libs.
	optional bool
	// settings describes the configuration used, for the report.
	settings func(cfg *config) string
	// open returns n lockers for n goroutines. With layout shared they all
	// use one client; with separate each has its own. closeAll releases
	// every client and background goroutine the lockers own.
	open func(e *cellEnv, lay layout, n int) (lockers []locker, closeAll func(), err error)
}

var registry []library

// register is called from the adapter files' init functions, so an adapter
// behind a build tag (adapter_dlock.go) joins the run only when built.
func register(l library) {
	registry = append(registry, l)
	slices.SortStableFunc(registry, func(a, b library) int { return a.order - b.order })
}

// selectLibraries resolves the -libs flag; an empty list means every
// non-optional library that is compiled in.
func selectLibraries(list string) ([]library, error) {
	if strings.TrimSpace(list) == "" {
		var out []library
		for _, l := range registry {
			if !l.optional {
				out = append(out, l)
			}
		}
		return out, nil
	}
	var out []library
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(registry, func(l library) bool { return l.name == name })
		if i < 0 {
			return nil, fmt.Errorf("unknown library %q; known: %s", name, strings.Join(libraryNames(), ", "))
		}
		out = append(out, registry[i])
	}
	return out, nil
}

func libraryNames() []string {
	var names []string
	for _, l := range registry {
		names = append(names, l.name)
	}
	return names
}

// openGoRedis builds the go-redis clients for a layout and wraps each in a
// locker made by mk. All clients count round trips into e.rt.
func openGoRedis(e *cellEnv, lay layout, n int, mk func(*redis.Client) locker) ([]locker, func(), error) {
	clients := make([]*redis.Client, 1)
	if lay == separate {
		clients = make([]*redis.Client, n)
	}
	for i := range clients {
		clients[i] = newGoRedis(e.addr, e.rt)
	}
	lockers := make([]locker, n)
	for i := range lockers {
		lockers[i] = mk(clients[i%len(clients)])
	}
	closeAll := func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}
	return lockers, closeAll, nil
}

// randomToken returns a 128-bit random lock value, the same strength the
// libraries use for theirs.
func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// sleepCtx sleeps for d or until ctx ends, whichever is first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
