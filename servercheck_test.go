package dlock

// Internal tests: nothing calls checkServer yet, so they call it directly.

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/serverreq"
)

// evictingServer is the configuration of a cache with little memory that
// evicts keys with a TTL: lock keys have one.
var evictingServer = []string{"--maxmemory", "3mb", "--maxmemory-policy", "volatile-lru"}

func TestCheckServerWarnsOnceOnEvictingPolicy(t *testing.T) {
	srv := redistest.Start(t, evictingServer...)
	logger, logs := captureLogs()
	c := newCheckClient(t, srv.Client(t), WithLogger(logger))
	for range 2 {
		if err := c.checkServer(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "level=WARN"); n != 1 {
		t.Fatalf("%d warnings, want 1:\n%s", n, out)
	}
	for _, want := range []string{"policy=volatile-lru", "evicts keys that have a TTL", `fix="CONFIG SET maxmemory-policy noeviction"`} {
		if !strings.Contains(out, want) {
			t.Errorf("warning without %q:\n%s", want, out)
		}
	}
}

func TestCheckServerQuietOnNoEviction(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "3mb", "--maxmemory-policy", "noeviction")
	logger, logs := captureLogs()
	c := newCheckClient(t, srv.Client(t), WithLogger(logger))
	if err := c.checkServer(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c.server.verdict.Load() == nil {
		t.Fatal("no verdict after the server answered")
	}
	if out := logs.String(); out != "" {
		t.Fatalf("logged on a noeviction server:\n%s", out)
	}
}

// A server that refuses CONFIG (managed Redis) answered: the check passes,
// says nothing, and does not ask again.
func TestCheckServerConfigRefused(t *testing.T) {
	srv := redistest.Start(t, "--rename-command", "CONFIG", "")
	rdb := srv.Client(t)
	if err := rdb.ConfigGet(context.Background(), "maxmemory-policy").Err(); err == nil {
		t.Fatal("the server answered CONFIG GET; the test needs it refused")
	}
	hook := countCalls(rdb)
	logger, logs := captureLogs()
	c := newCheckClient(t, rdb, WithLogger(logger))
	for range 2 {
		if err := c.checkServer(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if out := logs.String(); out != "" {
		t.Fatalf("logged:\n%s", out)
	}
	if n := hook.pipelines.Load(); n != 1 {
		t.Fatalf("%d round trips, want 1: a refusal is an answer", n)
	}
}

// Where CONFIG is refused, INFO memory still tells the policy: the managed
// services that refuse CONFIG are the ones that default to volatile-lru.
func TestCheckServerConfigRefusedReadsInfo(t *testing.T) {
	srv := redistest.Start(t, append([]string{"--rename-command", "CONFIG", ""}, evictingServer...)...)
	logger, logs := captureLogs()
	c := newCheckClient(t, srv.Client(t), WithLogger(logger))
	if err := c.checkServer(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "policy=volatile-lru") {
		t.Fatalf("want one warning about volatile-lru, got:\n%s", out)
	}
}

func TestCheckServerFastPath(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	hook := countCalls(rdb)
	c := newCheckClient(t, rdb)
	ctx := context.Background()
	if err := c.checkServer(ctx); err != nil {
		t.Fatal(err)
	}
	if p, n := hook.pipelines.Load(), hook.cmds.Load(); p != 1 || n != 6 {
		t.Fatalf("first check: %d pipelines of %d commands in all, want 1 of 6 (INFO server, INFO memory, CONFIG GET of maxmemory-policy, appendfsync and appendonly, COMMAND INFO)", p, n)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if err := c.checkServer(ctx); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("fast path allocates %v times per call", allocs)
	}
	if p, n := hook.pipelines.Load(), hook.cmds.Load(); p != 1 || n != 6 {
		t.Fatalf("after 1000 checks: %d pipelines, %d commands; want the first check's alone", p, n)
	}
}

// Goroutines that acquire at once on a new client share one check.
func TestCheckServerConcurrentFirstCalls(t *testing.T) {
	srv := redistest.Start(t, evictingServer...)
	rdb := srv.Client(t)
	hook := countCalls(rdb)
	logger, logs := captureLogs()
	c := newCheckClient(t, rdb, WithLogger(logger))
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if err := c.checkServer(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := hook.pipelines.Load(); n != 1 {
		t.Errorf("%d round trips, want 1", n)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Errorf("%d warnings, want 1", n)
	}
}

func TestCheckServerRefusesOldServer(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	hook := countCalls(rdb)
	rdb.AddHook(fakeVersion("4.0.14"))
	c := newCheckClient(t, rdb)
	for range 3 {
		err := c.checkServer(context.Background())
		if !errors.Is(err, ErrUnsupportedServer) {
			t.Fatalf("err = %v, want ErrUnsupportedServer", err)
		}
		if msg := err.Error(); !strings.Contains(msg, "4.0.14") || !strings.Contains(msg, "5.0 or newer") {
			t.Fatalf("error %q does not name the version found and the one needed", msg)
		}
	}
	if n := hook.pipelines.Load(); n != 1 {
		t.Fatalf("%d round trips, want 1: the verdict is kept", n)
	}
}

// A check that found no server runs again on the next call; the warning
// comes with the check that was answered, once.
func TestCheckServerRetriesUnheardServer(t *testing.T) {
	srv := redistest.Start(t, evictingServer...)
	rdb := srv.Client(t)
	logger, logs := captureLogs()
	c := newCheckClient(t, rdb, WithLogger(logger))
	srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.checkServer(ctx); err != nil {
		t.Fatalf("unheard server: %v, want nil (best effort)", err)
	}
	if c.server.verdict.Load() != nil {
		t.Fatal("a verdict without an answer")
	}
	if err := srv.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	// go-redis may refuse to dial for a moment after failed dials: the
	// check runs again on each call until the server is heard.
	deadline := time.Now().Add(5 * time.Second)
	for c.server.verdict.Load() == nil {
		if time.Now().After(deadline) {
			t.Fatal("no verdict 5 s after the server came back")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.checkServer(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := c.checkServer(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Fatalf("%d warnings, want 1:\n%s", n, logs.String())
	}
}

// In a Cluster every primary is asked; one warning names them all, and an
// old primary (here a fake 6.2) is refused because of the shard channels.
func TestCheckServerCluster(t *testing.T) {
	cs := redistest.StartCluster(t, redistest.WithReplicas(0), redistest.WithServerArgs("--maxmemory-policy", "allkeys-lru"))
	logger, logs := captureLogs()
	c := newCheckClient(t, cs.ClusterClient(t), WithLogger(logger))
	if err := c.checkServer(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "policy=allkeys-lru") {
		t.Fatalf("want one warning about allkeys-lru, got:\n%s", out)
	}
	for _, addr := range cs.Addrs {
		if !strings.Contains(out, addr) {
			t.Errorf("primary %s missing from the warning:\n%s", addr, out)
		}
	}

	old := cs.ClusterClient(t)
	old.OnNewNode(func(node *redis.Client) { node.AddHook(fakeVersion("6.2.0")) })
	logger, _ = captureLogs()
	err := newCheckClient(t, old, WithLogger(logger)).checkServer(context.Background())
	if !errors.Is(err, ErrUnsupportedServer) {
		t.Fatalf("err = %v, want ErrUnsupportedServer", err)
	}
	for _, want := range []string{"6.2.0 at 127.0.0.1:", "has no SPUBLISH", "SSUBSCRIBE"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q without %q", err, want)
		}
	}
}

func TestCheckVersion(t *testing.T) {
	yes, no := true, false
	redis := func(v string) serverreq.Server { return serverreq.Server{Name: "Redis", Version: v} }
	valkey := serverreq.Server{Name: "Valkey", Version: "8.0.1", Compat: "7.2.4"}
	for _, tc := range []struct {
		server  serverreq.Server
		shard   *bool // COMMAND INFO SPUBLISH: nil when refused
		cluster bool
		want    string // part of the error; "" for none
	}{
		{redis("4.0.14"), nil, false, "Redis 4.0.14; dlock needs Redis 5.0 or newer (its scripts read TIME before writing"},
		{redis("4.0.14"), nil, true, "Redis 4.0.14; dlock needs Redis 5.0 or newer"},
		{redis("6.2.0"), nil, true, "Redis 6.2.0; a Redis Cluster needs Redis 7.0 or newer (lock hand-offs use the shard channels SPUBLISH and SSUBSCRIBE)"},
		{redis("6.2.0"), &no, true, "Redis 6.2.0 has no SPUBLISH (COMMAND INFO); a Cluster needs it"},
		// The server's answer decides, not its version: a build that
		// reports 6.2 but has SPUBLISH passes, one that reports 7.0
		// without it does not.
		{redis("6.2.0"), &yes, true, ""},
		{redis("7.0.15"), &no, true, "has no SPUBLISH"},
		{redis("6.2.0"), nil, false, ""},
		{redis("5.0.0"), nil, false, ""},
		{redis("7.0.15"), nil, false, ""},
		{redis("7.0.15"), nil, true, ""},
		{redis("7.2.4-rc1"), nil, true, ""},
		{redis("255.255.255"), nil, true, ""}, // a build from the unstable branch
		{redis(""), nil, true, ""},
		{redis("garbage"), nil, true, ""},
		{redis("4"), nil, false, ""}, // a major alone is not a version
		{redis("4.x"), nil, false, ""},
		{redis("4..0"), nil, false, ""},
		{redis("4.0.0.1"), nil, false, ""},
		{redis("12345678901.0"), nil, false, ""},
		{valkey, &yes, true, ""},
		{valkey, nil, false, ""},
		{serverreq.Server{Name: "Valkey", Version: "7.1.0"}, nil, false, "Valkey 7.1.0; dlock needs Valkey 7.2 or newer"},
	} {
		err := checkVersion(serverFacts{server: tc.server, shard: tc.shard}, tc.cluster)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("checkVersion(%v, shard %v, cluster %v) = %v, want nil", tc.server, tc.shard, tc.cluster, err)
		case tc.want != "" && (!errors.Is(err, ErrUnsupportedServer) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("checkVersion(%v, shard %v, cluster %v) = %v, want ErrUnsupportedServer with %q", tc.server, tc.shard, tc.cluster, err, tc.want)
		}
	}
}

// A server says what it is in INFO server: Valkey by valkey_version (its
// redis_version is 7.2.4 for ever) or server_name, Redis otherwise.
func TestIdentifyServer(t *testing.T) {
	for _, tc := range []struct {
		info string
		want string
	}{
		{"redis_version:7.0.15\r\n", "Redis 7.0.15"},
		{"redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n", "Valkey 8.0.1 (redis_version 7.2.4)"},
		{"server_name:valkey\r\nredis_version:7.2.4\r\n", "Valkey 7.2.4"},
		{"", "Redis (version not shown)"},
	} {
		s := serverreq.Identify(func(k string) string { return infoField(tc.info, k) })
		if s.String() != tc.want {
			t.Errorf("Identify(%q) = %q, want %q", tc.info, s, tc.want)
		}
	}
}

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want [3]int
		ok   bool
	}{
		{"7.0.15", [3]int{7, 0, 15}, true},
		{" 7.2\r", [3]int{7, 2, 0}, true},
		{"7.2.4-valkey", [3]int{7, 2, 4}, true},
		{"6.3-keydb", [3]int{6, 3, 0}, true},
		{"7", [3]int{}, false},
		{"7.", [3]int{}, false},
		{"v7.0.0", [3]int{}, false},
		{"7.0.15.1", [3]int{}, false},
		{"1234567890.0", [3]int{}, false},
		{"", [3]int{}, false},
	} {
		got, ok := parseVersion(tc.in)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("parseVersion(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestEvictionRisk(t *testing.T) {
	for _, tc := range []struct {
		policy string
		risky  bool
		why    string
	}{
		{"noeviction", false, ""},
		{"", false, ""},
		{"volatile-lru", true, "evicts keys that have a TTL"},
		{"volatile-lfu", true, "evicts keys that have a TTL"},
		{"volatile-ttl", true, "evicts keys that have a TTL"},
		{"volatile-random", true, "evicts keys that have a TTL"},
		{"allkeys-lru", true, "evicts any key"},
		{"allkeys-random", true, "evicts any key"},
		{"some-future-policy", true, "is not noeviction"},
	} {
		why, risky := evictionRisk(tc.policy)
		if risky != tc.risky || !strings.Contains(why, tc.why) {
			t.Errorf("evictionRisk(%q) = %q, %v; want %v with %q", tc.policy, why, risky, tc.risky, tc.why)
		}
		if risky && (!strings.Contains(why, tc.policy) || !strings.Contains(why, "CONFIG SET maxmemory-policy noeviction")) {
			t.Errorf("evictionRisk(%q) = %q: names neither the policy nor the fix", tc.policy, why)
		}
	}
}

// newCheckClient returns a Client closed at the end of the test.
func newCheckClient(t *testing.T, rdb redis.UniversalClient, opts ...Option) *Client {
	t.Helper()
	c := MustNew(rdb, opts...)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// captureLogs returns a logger at Debug level and what it wrote.
func captureLogs() (*slog.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// countCalls counts what rdb sends from now on.
func countCalls(rdb *redis.Client) *countHook {
	hook := &countHook{}
	rdb.AddHook(hook)
	return hook
}

// countHook counts the commands and pipelines a client sends, leaving out
// the set-up of a new connection (HELLO, CLIENT SETINFO), which go-redis
// sends through the hooks too.
type countHook struct{ cmds, pipelines atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds)
		return next(ctx, cmds)
	}
}

func (h *countHook) count(cmds []redis.Cmder) {
	n := 0
	for _, cmd := range cmds {
		if name := cmd.Name(); name != "hello" && name != "client" {
			n++
		}
	}
	if n > 0 {
		h.pipelines.Add(1)
		h.cmds.Add(int64(n))
	}
}

// fakeVersion makes INFO server report another redis_version: the test
// harness has one Redis, and old ones are what is refused.
type fakeVersion string

func (v fakeVersion) DialHook(next redis.DialHook) redis.DialHook { return next }

func (v fakeVersion) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (v fakeVersion) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			info, ok := cmd.(*redis.StringCmd)
			if ok && cmd.Name() == "info" && len(cmd.Args()) == 2 && cmd.Args()[1] == "server" {
				// An old Redis: on Valkey too, whose own version and name go.
				val := strings.Replace(info.Val(), "redis_version:", "redis_version:"+string(v)+"\r\nreal_redis_version:", 1)
				val = strings.NewReplacer("valkey_version:", "real_valkey_version:", "server_name:valkey", "server_name:redis").Replace(val)
				info.SetVal(val)
			}
			// A Redis older than 7.0 does not know SPUBLISH either.
			// (nor WAITAOF, which the same query asks of it).
			if c, ok := cmd.(*redis.Cmd); ok && cmd.Name() == "command" && len(cmd.Args()) >= 3 && cmd.Args()[2] == "spublish" {
				if pv, ok := parseVersion(string(v)); ok && older(pv, [2]int{7, 0}) {
					c.SetVal(make([]any, len(cmd.Args())-2))
				}
			}
		}
		return err
	}
}
