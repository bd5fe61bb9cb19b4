package dlock_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

// The tests of WithDurableGrant pick their server themselves: Valkey has
// WAITAOF, Debian's Redis 7.0 has not. They run in the Redis run and the
// Valkey run alike.

// aofHook watches the pipelines that carry WAITAOF and, while unconfirm is
// set, replaces WAITAOF's answer with [0, 0] after Redis ran the pipeline:
// the grant or renewal is in Redis, but not confirmed on disk, as when the
// fsync takes longer than the timeout.
type aofHook struct {
	unconfirm atomic.Bool
	// demoted, while above 0, answers that many WAITAOFs with the error
	// Redis gives a replica's WAITAOF, as when a failover demoted the
	// server between the grant and its WAITAOF.
	demoted   atomic.Int64
	mu        sync.Mutex
	pipelines [][]string // the command names of each pipeline with WAITAOF
	scripts   atomic.Int64
}

func (h *aofHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *aofHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd, scripts.Acquire) {
			h.scripts.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *aofHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if isScript(c, scripts.Acquire) {
				h.scripts.Add(1)
			}
		}
		err := next(ctx, cmds)
		var names []string
		var wait *redis.Cmd
		for _, c := range cmds {
			name := strings.ToUpper(c.Name())
			if name == "EVALSHA" || name == "EVAL" {
				switch {
				case isScript(c, scripts.Acquire):
					name = "acquire"
				case isScript(c, scripts.Refresh):
					name = "refresh"
				}
			}
			names = append(names, name)
			if name == "WAITAOF" {
				wait, _ = c.(*redis.Cmd)
			}
		}
		if wait == nil {
			return err
		}
		if h.unconfirm.Load() && wait.Err() == nil {
			wait.SetVal([]any{int64(0), int64(0)})
		}
		if h.demoted.Load() > 0 && h.demoted.Add(-1) >= 0 {
			wait.SetErr(serverReply("ERR WAITAOF cannot be used with replica instances. Please also note that writes to replicas are just local and are not propagated."))
		}
		h.mu.Lock()
		h.pipelines = append(h.pipelines, names)
		h.mu.Unlock()
		return err
	}
}

// serverReply is an error reply as go-redis reads one from the server
// (a redis.Error).
type serverReply string

func (e serverReply) Error() string { return string(e) }
func (serverReply) RedisError()     {}

// count returns how many WAITAOF pipelines began with a call of script.
func (h *aofHook) count(script string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, p := range h.pipelines {
		if len(p) == 2 && p[0] == script && p[1] == "WAITAOF" {
			n++
		}
	}
	return n
}

// durableSetup starts a server of flavor with args and a dlock Client on a
// go-redis client carrying an aofHook.
func durableSetup(t *testing.T, flavor string, args ...string) (*dlock.Client, *redis.Client, *aofHook) {
	t.Helper()
	srv := redistest.StartFlavor(t, flavor, args...)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	h := &aofHook{}
	rdb.AddHook(h)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c, srv.Client(t), h
}

// aofAlways is the one AOF setting under which Valkey's WAITAOF stands for
// an fsync (serverreq.EarlyWaitAOF): the tests of what the option does run
// there, the hook standing in for a slow fsync.
var aofAlways = []string{"--appendonly", "yes", "--appendfsync", "always"}

func TestDurableGrantAndRenewalsWaitForTheAOF(t *testing.T) {
	c, _, h := durableSetup(t, "valkey", aofAlways...)
	ctx := context.Background()
	ttl := 1500 * time.Millisecond
	l, err := c.Acquire(ctx, "durable", dlock.WithTTL(ttl), dlock.WithDurableGrant(500*time.Millisecond))
	if err != nil {
		t.Fatalf("acquire on Valkey with appendonly yes: %v", err)
	}
	if n := h.count("acquire"); n != 1 {
		t.Fatalf("%d pipelines of the acquire script and WAITAOF, want 1 (%v)", n, h.pipelines)
	}
	// Renewals go every TTL/3, each followed by WAITAOF on its connection.
	waitFor(t, "two renewals confirmed by WAITAOF", func() bool { return h.count("refresh") >= 2 })
	if err := l.Context().Err(); err != nil {
		t.Fatalf("lock ended while its renewals were confirmed: %v", context.Cause(l.Context()))
	}
	if err := l.Refresh(ctx, ttl); err != nil {
		t.Fatalf("Refresh of a durable lock: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestDurableGrantNotConfirmedIsReleased(t *testing.T) {
	c, admin, h := durableSetup(t, "valkey", aofAlways...)
	ctx := context.Background()
	h.unconfirm.Store(true)
	_, err := c.TryAcquire(ctx, "unconfirmed", dlock.WithDurableGrant(50*time.Millisecond))
	var de *dlock.DurableError
	if !errors.Is(err, dlock.ErrNotDurable) || !errors.As(err, &de) || de.Local {
		t.Fatalf("TryAcquire with the fsync unconfirmed: %v, want a *DurableError with Local false", err)
	}
	if !strings.Contains(err.Error(), "lock released") {
		t.Fatalf("error %q does not say the grant was released", err)
	}
	// The grant ran in Redis and was released: nobody is locked out.
	other, err := dlock.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	l, err := other.TryAcquire(ctx, "unconfirmed")
	if err != nil {
		t.Fatalf("the unconfirmed grant was left held: %v", err)
	}
	_ = l.Release(ctx)

	// A waiting Acquire tries again with fresh tokens until its wait ends,
	// and says why it got nothing.
	before := h.count("acquire")
	_, err = c.Acquire(ctx, "unconfirmed", dlock.WithDurableGrant(50*time.Millisecond), dlock.WithWait(400*time.Millisecond))
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, dlock.ErrNotDurable) {
		t.Fatalf("waiting Acquire with every fsync unconfirmed: %v, want ErrNotObtained and ErrNotDurable", err)
	}
	if n := h.count("acquire") - before; n < 2 {
		t.Fatalf("the wait made %d attempts, want it to try again", n)
	}
	if n, err := admin.Exists(ctx, "dlock:{unconfirmed}").Result(); err != nil || n != 0 {
		t.Fatalf("lock key left after the wait: %d, %v", n, err)
	}
}

func TestDurableRenewalNotConfirmedDoesNotExtendTheLease(t *testing.T) {
	c, _, h := durableSetup(t, "valkey", aofAlways...)
	ctx := context.Background()
	ttl := 1500 * time.Millisecond
	l, err := c.Acquire(ctx, "renewal", dlock.WithTTL(ttl), dlock.WithDurableGrant(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// From now the renewals run in Redis, but none is confirmed on disk:
	// a restart could bring back the lease of the grant, not theirs. The
	// lock must end by its last confirmed lease, as if unrenewed.
	h.unconfirm.Store(true)
	if err := l.Refresh(ctx, ttl); !errors.Is(err, dlock.ErrNotDurable) {
		t.Fatalf("Refresh with the fsync unconfirmed: %v, want ErrNotDurable", err)
	}
	select {
	case <-l.Context().Done():
	case <-time.After(5 * ttl):
		t.Fatalf("lock still held %v after its renewals stopped being confirmed on disk", 5*ttl)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("lock ended with %v, want ErrLockLost", cause)
	}
	if h.count("refresh") == 0 {
		t.Fatal("no renewal was sent with WAITAOF")
	}
}

func TestDurableGrantWithAOFOffIsRefused(t *testing.T) {
	c, admin, h := durableSetup(t, "valkey")
	ctx := context.Background()
	_, err := c.Acquire(ctx, "aof-off", dlock.WithDurableGrant(50*time.Millisecond), dlock.WithWait(time.Minute))
	if !errors.Is(err, dlock.ErrUnsupportedServer) || !strings.Contains(err.Error(), "CONFIG SET appendonly yes") {
		t.Fatalf("Acquire with AOF off: %v, want ErrUnsupportedServer saying how to turn AOF on", err)
	}
	if n := h.scripts.Load(); n != 0 {
		t.Fatalf("%d acquire scripts sent with AOF off", n)
	}
	if n, err := admin.Exists(ctx, "dlock:{aof-off}").Result(); err != nil || n != 0 {
		t.Fatalf("lock key left after the refusal: %d, %v", n, err)
	}
}

// AOF turned off after the Client's check: the server refuses WAITAOF,
// the grant is released, and the wait ends at once, since no later
// attempt is confirmed either.
func TestDurableGrantRefusedWAITAOFEndsTheWait(t *testing.T) {
	c, admin, _ := durableSetup(t, "valkey", aofAlways...)
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "aof-off-later", dlock.WithDurableGrant(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	if err := admin.ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(ctx, "aof-off-later", dlock.WithDurableGrant(50*time.Millisecond), dlock.WithWait(time.Minute))
	var de *dlock.DurableError
	if !errors.As(err, &de) || !strings.Contains(de.Refused, "appendonly") {
		t.Fatalf("Acquire after AOF was turned off: %v, want a *DurableError with the server's refusal", err)
	}
	if errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("the refusal was waited out as an outage: %v", err)
	}
	if !strings.Contains(err.Error(), "CONFIG SET appendonly yes") {
		t.Fatalf("error %q does not say how to fix it", err)
	}
	if n, err := admin.Exists(ctx, "dlock:{aof-off-later}").Result(); err != nil || n != 0 {
		t.Fatalf("lock key left after the refusal: %d, %v", n, err)
	}
}

// A WAITAOF answered ERR by a server whose AOF is on (a replica's answer:
// a failover demoted the server between the grant and its WAITAOF) is of a
// moment: the grant is released and the wait goes on, and the next attempt
// is confirmed. Only a server that says its AOF is off ends the wait.
func TestDurableGrantReplicaRefusalIsWaitedOut(t *testing.T) {
	c, admin, h := durableSetup(t, "valkey", aofAlways...)
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "demoted", dlock.WithDurableGrant(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h.demoted.Store(1)
	l, err = c.Acquire(ctx, "demoted", dlock.WithDurableGrant(50*time.Millisecond), dlock.WithWait(10*time.Second))
	if err != nil {
		t.Fatalf("Acquire after one WAITAOF answered as by a replica: %v, want the next attempt's grant", err)
	}
	if n := h.demoted.Load(); n > 0 {
		t.Fatalf("the refusal was never sent (%d left)", n)
	}
	if got := admin.HGet(ctx, "dlock:{demoted}", "token").Val(); got != l.Token() {
		t.Fatalf("Redis holds token %q, want the returned lock's", got)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// The first durable acquisition of a Client asks the server whether
// WAITAOF stands for an fsync; a server that does not answer yet (down, and
// back within the wait) is waited for as an outage is, and a closed Client
// or a cancelled context say so rather than ErrUnavailable.
func TestDurableCheckRidesOutAnOutageWithinTheWait(t *testing.T) {
	srv := redistest.StartFlavor(t, "valkey", aofAlways...)
	var dials atomic.Int64
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newLocker(t, rdb)
	ctx := context.Background()

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Acquire(cancelled, "outage", dlock.WithDurableGrant(50*time.Millisecond), dlock.WithWait(time.Minute)); !errors.Is(err, context.Canceled) {
		t.Fatalf("durable Acquire on a cancelled context: %v, want context.Canceled", err)
	}

	srv.Kill()
	before := dials.Load()
	type result struct {
		l   dlock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := c.Acquire(ctx, "outage", dlock.WithDurableGrant(50*time.Millisecond), dlock.WithWait(20*time.Second))
		got <- result{l, err}
	}()
	waitFor(t, "the check to find the server down twice", func() bool { return dials.Load() >= before+2 })
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("durable Acquire across a short outage at its first check: %v, want a grant once the server is back", r.err)
	}
	if err := r.l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	closed := dlock.MustNew(rdb)
	_ = closed.Close(ctx)
	if _, err := closed.TryAcquire(ctx, "outage", dlock.WithDurableGrant(50*time.Millisecond)); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("durable TryAcquire on a closed Client: %v, want ErrClosed", err)
	}
}

func TestDurableGrantWithoutWAITAOFIsUnsupported(t *testing.T) {
	c, admin, h := durableSetup(t, "redis")
	ctx := context.Background()
	if known, err := admin.Do(ctx, "command", "info", "waitaof").Slice(); err != nil || len(known) != 1 || known[0] != nil {
		t.Fatalf("this redis-server knows WAITAOF (%v, %v): the test needs one without (Debian bookworm's 7.0)", known, err)
	}
	// A durable acquisition waits for the Client's server check: refused
	// before anything is sent, naming the server.
	_, err := c.TryAcquire(ctx, "old-server", dlock.WithDurableGrant(50*time.Millisecond))
	if !errors.Is(err, dlock.ErrUnsupportedServer) {
		t.Fatalf("TryAcquire on Redis 7.0: %v, want ErrUnsupportedServer", err)
	}
	for _, part := range []string{"Redis 7.", "WAITAOF"} {
		if !strings.Contains(err.Error(), part) {
			t.Fatalf("error %q does not say %q", err, part)
		}
	}
	if n := h.scripts.Load(); n != 0 {
		t.Fatalf("%d acquire scripts sent to a server without WAITAOF", n)
	}
}

// Valkey answers WAITAOF before its fsync under everysec (see
// TestWAITAOFConfirmsBeforeFsyncUnderEverysec in internal/torture): the
// option is refused there, with what to do, and nothing is sent.
func TestDurableGrantRefusedWhereWAITAOFAnswersEarly(t *testing.T) {
	c, admin, h := durableSetup(t, "valkey", "--appendonly", "yes", "--appendfsync", "everysec")
	ctx := context.Background()
	_, err := c.Acquire(ctx, "early", dlock.WithDurableGrant(time.Second))
	if !errors.Is(err, dlock.ErrUnsupportedServer) {
		t.Fatalf("Acquire on Valkey with everysec: %v, want ErrUnsupportedServer", err)
	}
	for _, part := range []string{"Valkey 8", "everysec", "redis/redis#13793", "appendfsync always"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not say %q", err, part)
		}
	}
	if n := h.scripts.Load(); n != 0 {
		t.Fatalf("%d acquire scripts sent", n)
	}
	// Without the option, the same Client locks as usual.
	l, err := c.TryAcquire(ctx, "early")
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	if n := admin.Exists(ctx, "dlock:{early}").Val(); n != 0 {
		t.Fatal("lock key left")
	}
}

func TestDurableGrantTimeoutBounds(t *testing.T) {
	srv := redistest.StartFlavor(t, "valkey", aofAlways...)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 400 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newLocker(t, rdb)
	ctx := context.Background()
	for _, d := range []time.Duration{time.Microsecond, 400 * time.Millisecond} {
		_, err := c.TryAcquire(ctx, "bounds", dlock.WithDurableGrant(d))
		if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "WithDurableGrant") {
			t.Fatalf("WithDurableGrant(%v) under a 400ms read timeout: %v, want ErrInvalidOption naming the option", d, err)
		}
	}
	if n := rdb.Exists(ctx, "dlock:{bounds}").Val(); n != 0 {
		t.Fatal("refused, but the lock is in Redis")
	}
}

func TestDurableHandOffNotConfirmedIsNotReturned(t *testing.T) {
	holder, admin, _ := durableSetup(t, "valkey", aofAlways...)
	ctx := context.Background()
	ttl := 1500 * time.Millisecond
	l, err := holder.Acquire(ctx, "handoff", dlock.WithTTL(ttl), dlock.WithDurableGrant(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// A second client waits in line with every WAITAOF of its own
	// unconfirmed: the release hands the lock to it, and the refresh that
	// takes the hand-off over is not on disk.
	rdb := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	h := &aofHook{}
	h.unconfirm.Store(true)
	rdb.AddHook(h)
	waiter := newLocker(t, rdb)
	got := make(chan error, 1)
	go func() {
		wl, err := waiter.Acquire(ctx, "handoff", dlock.WithTTL(ttl), dlock.WithDurableGrant(100*time.Millisecond), dlock.WithWait(2*time.Second))
		if err == nil {
			_ = wl.Release(ctx)
		}
		got <- err
	}()
	waitFor(t, "the waiter in line", func() bool { return admin.ZCard(ctx, "dlock:{handoff}:q").Val() == 1 })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-got
	if !errors.Is(err, dlock.ErrNotDurable) {
		t.Fatalf("waiter whose hand-off was not confirmed on disk: %v, want ErrNotDurable", err)
	}
	if h.count("refresh") == 0 {
		t.Fatalf("the hand-off was not taken over with a refresh and WAITAOF: %v", h.pipelines)
	}
	if n := admin.Exists(ctx, "dlock:{handoff}").Val(); n != 0 {
		t.Fatal("the unconfirmed hand-off was left held")
	}
}
