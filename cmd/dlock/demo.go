package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlock-go/dlock/internal/redistest"
)

type demoOptions struct {
	workers, stock, users int
	ttl, pause            time.Duration
}

const demoLong = `Run the story of the Redis-lock articles for real, twice, and compare.

Several worker processes sell a limited stock, one item per user. Every user
tries once on every worker, as a user pressing "buy" on several servers at
once. An order is a read (stock, the user's orders), a check and a write,
under a lock. Now and then a holder is frozen (SIGSTOP, like a long
stop-the-world GC pause) between its check and its write, for longer than the
lock's TTL.

Run 1 uses the naive lock: SETNX, then PEXPIRE, the value "locked", a plain
DEL. Run 2 uses dlock, and the shop refuses writes whose fencing token is
below the highest it has seen. The table compares orders, overselling,
duplicate orders, locks deleted by a holder that no longer owned them, and
stale writes refused by fencing.

Without --url or --addr it starts a throwaway redis-server on a free loopback
port and stops it at the end (also on Ctrl-C). With them it uses that Redis,
under a key prefix of its own that it deletes at the end. Exits 1 if the dlock
run shows overselling or duplicate orders.`

func newDemoCmd(a *app) *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Watch a naive Redis lock oversell, and dlock not",
		Long:  demoLong,
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := unixOnly("demo"); err != nil {
				return err
			}
			switch {
			case o.workers < 2 || o.workers > 16:
				return usagef("--workers %d: want 2..16", o.workers)
			case o.stock < 1 || o.users < 1:
				return usagef("--stock and --users must be positive")
			case o.ttl < 50*time.Millisecond:
				return usagef("--ttl %v: want at least 50ms, or renewal cannot keep up on a busy machine", o.ttl)
			case o.pause <= o.ttl:
				return usagef("--pause %v must be longer than --ttl %v: the demo is about a holder outliving its lease", o.pause, o.ttl)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			err := a.demo(ctx, cmd, o)
			if ctx.Err() != nil && cmd.Context().Err() == nil {
				return &exitError{code: exitSignal + int(syscall.SIGINT), err: errors.New("demo interrupted; its workers and servers were stopped")}
			}
			return err
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&o.workers, "workers", 4, "worker processes")
	fs.IntVar(&o.stock, "stock", 50, "items in stock")
	fs.IntVar(&o.users, "users", 80, "users 1..N, each trying once on every worker")
	durationFlag(fs, &o.ttl, "ttl", "", 300*time.Millisecond, "lock TTL, naive and dlock")
	durationFlag(fs, &o.pause, "pause", "", time.Second, "how long a frozen holder stands still")
	return cmd
}

// demo holds one demo's shared state.
type demo struct {
	a        *app
	o        demoOptions
	rdb      redis.UniversalClient
	shop     *shop
	self     string   // the dlock binary, run again as each worker
	connArgs []string // the flags that take a worker to the same Redis
	env      []string
	prefix   string
	mu       sync.Mutex // one progress line at a time
}

func (a *app) demo(ctx context.Context, cmd *cobra.Command, o demoOptions) error {
	self, err := a.self()
	if err != nil {
		return fmt.Errorf("demo: find the dlock binary to run workers with: %w", err)
	}
	d := &demo{a: a, o: o, self: self, env: a.environ(), prefix: "dlockdemo:" + randomHex(4) + ":"}
	if connGiven(cmd.Flags()) {
		if d.rdb, err = a.redis(); err != nil {
			return err
		}
		d.connArgs = changedFlags(cmd.Root().PersistentFlags())
		if a.conn.password != "" { // typed at --ask-pass: the workers cannot ask
			d.env = append(d.env, "DLOCK_PASSWORD="+a.conn.password)
		}
		d.printf("demo: using the Redis given by --url/--addr, keys under %q (deleted at the end)\n", d.prefix)
	} else {
		dir, err := os.MkdirTemp("", "dlock-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		srv, err := redistest.Launch(ctx, dir)
		if err != nil {
			return fmt.Errorf("demo: start a throwaway redis-server (or give --url/--addr): %w", err)
		}
		defer srv.Kill()
		d.rdb = redis.NewClient(&redis.Options{MaintNotificationsConfig: noMaintNotifications(), Addr: srv.Addr, ContextTimeoutEnabled: true})
		d.connArgs = []string{"--addr", srv.Addr}
		// The throwaway server has no password: do not send one from the
		// environment, which is meant for the user's own Redis.
		d.env = append(d.env, "DLOCK_PASSWORD=", "REDISCLI_AUTH=")
		d.printf("demo: throwaway redis-server on %s (stopped at the end)\n", srv.Addr)
	}
	defer d.rdb.Close()
	defer d.cleanup()
	d.shop = newShop(d.rdb, d.prefix)

	d.printf("demo: %d worker processes sell %d items, one per user, to users 1..%d; every user tries once on every worker.\n",
		o.workers, o.stock, o.users)
	d.printf("demo: now and then a holder is frozen for %v between its check and its write; the lock TTL is %v.\n\n", o.pause, o.ttl)
	var res [2]modeResult
	for i, mode := range []string{"naive", "dlock"} {
		d.printf("== run %d: %s ==\n", i+1, modeTitle[mode])
		if res[i], err = d.runMode(ctx, mode); err != nil {
			return fmt.Errorf("demo: %s run: %w", mode, err)
		}
		d.printf("%s: done in %v\n\n", mode, roundDur(res[i].elapsed))
	}
	return d.report(res[0], res[1])
}

var modeTitle = map[string]string{
	"naive": `naive lock: SETNX, then PEXPIRE; value "locked"; plain DEL`,
	"dlock": "dlock: atomic acquire with TTL, renewal, fencing token checked by the shop, release by token",
}

// cleanup deletes the demo's keys, on a context of its own: the demo's may
// have been cancelled by Ctrl-C. On a throwaway server it is moot but cheap.
func (d *demo) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	del := func(ctx context.Context, node redis.UniversalClient) error {
		it := node.Scan(ctx, 0, d.prefix+"*", 500).Iterator()
		for it.Next(ctx) { // SCAN ends when the cursor comes back to 0
			node.Del(ctx, it.Val())
		}
		return it.Err()
	}
	if cc, ok := d.rdb.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return del(ctx, n) })
		return
	}
	_ = del(ctx, d.rdb)
}

func (d *demo) printf(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.a.stdout, format, args...)
}

// changedFlags renders the flags set on the command line again, for a
// worker: --ask-pass is left out, its answer goes through the environment.
func changedFlags(fs *pflag.FlagSet) []string {
	var args []string
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Changed || f.Name == "ask-pass" {
			return
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			for _, v := range sv.GetSlice() {
				args = append(args, "--"+f.Name+"="+v)
			}
			return
		}
		args = append(args, "--"+f.Name+"="+f.Value.String())
	})
	return args
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
