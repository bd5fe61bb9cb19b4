package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/torture"
)

type tortureOptions struct {
	workers   int
	duration  time.Duration
	resource  string
	seed      uint64
	yes       bool
	local     bool
	scenarios []string
}

// minScenario is the shortest a scenario runs: the nemesis waits a quarter
// to three quarters of a second between faults and injects none in the last
// second, so a shorter one would barely fault anything.
const minScenario = 3 * time.Second

const tortureLong = `Run dlock under faults against your Redis, and check what happened.

Worker processes (this binary, run again) contend for two lock names with a
500ms TTL, and update a counter kept in a second Redis, the protected
resource, presenting the lock's fencing token on every read and write.
Meanwhile the run kills workers (SIGKILL), freezes them past their TTL
(SIGSTOP), cuts or delays their connections to Redis, and resets connections
right after a lock command was sent. Then it judges the history: two holders
at once, fences that do not grow, lost updates, locks a dead holder left
behind, losses a holder never heard of. An overlap the lock's contract admits
(a holder frozen past its lease) is counted as expected, with its reason;
anything else is a violation, printed as a counterexample.

The scenarios (kill, pause, blackhole, latency, reset, mixed; and for the
lock family: semaphore, one name of 3 permits, where more than 3 holders at
once is the violation; shared, read and write locks, where only reads may
overlap; election, leader terms of package election) share --duration, at
least 3s each (mixed 12s, semaphore, shared and election 8s); --scenario
picks some.

The locks go to the Redis the connection flags name: one server, by
-u/--url, --addr, --user and the password from the environment. Sentinel,
Cluster and TLS are not supported here: those topologies, failovers
included, are run by "make torture" in dlock's repository. The database must
hold no other keys, unless --yes: the run writes only keys under a prefix of
its own, dlock-torture:<random>: (under --prefix if given), and deletes them
at the end, also on Ctrl-C.

The protected resource is --resource host:port, a second Redis (no password,
database 0, same rules about other keys), or else a throwaway redis-server
the run starts on a free loopback port (it needs redis-server on PATH).

--local starts a throwaway redis-server for the locks too, so that a run
needs no setup, and adds the scenarios that only a server of the run's own
allows: restart with appendfsync always (restart-aof), restart without
persistence (restart-empty), eviction under maxmemory (evict).

A failover you trigger during the run (of a managed Redis, say) is measured
too, but the run cannot know of it: any overlap it causes is reported as a
violation, although with asynchronous replication a failover can lose a lock,
a loss dlock's contract does not cover.

Progress goes to stderr, a line per scenario and per fault; the table goes to
stdout, Markdown, its last line "violations: N". Exits 6 if N > 0.`

func newTortureCmd(a *app) *cobra.Command {
	var o tortureOptions
	cmd := &cobra.Command{
		Use:   "torture",
		Short: "Run dlock under faults against your Redis and check for violations",
		Long:  tortureLong,
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := unixOnly("torture"); err != nil {
				return err
			}
			switch {
			case o.workers < 2 || o.workers > 64:
				return usagef("--workers %d: want 2..64", o.workers)
			case o.duration <= 0:
				return usagef("--duration %v must be positive", o.duration)
			case o.local && connGiven(cmd.Flags()):
				return usagef("--local starts a Redis of its own: it excludes --url and --addr")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return a.torture(ctx, cmd, o)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&o.workers, "workers", 8, "worker processes per scenario")
	durationFlag(fs, &o.duration, "duration", "", time.Minute, "the whole run, shared by the scenarios (at least 3s each)")
	fs.StringVar(&o.resource, "resource", "", "host:port of a second Redis for the protected resource (default: a throwaway redis-server)")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the faults' choices (default: random); the timing does not repeat")
	fs.BoolVar(&o.yes, "yes", false, "run even if the database holds other keys (only the run's own are written and deleted)")
	fs.BoolVar(&o.local, "local", false, "start a throwaway redis-server for the locks too, and add the server-side scenarios")
	fs.StringSliceVar(&o.scenarios, "scenario", nil, "run only these scenarios (comma-separated or repeated)")
	return cmd
}

func (a *app) torture(ctx context.Context, cmd *cobra.Command, o tortureOptions) error {
	self, err := a.self()
	if err != nil {
		return fmt.Errorf("torture: find the dlock binary to run workers with: %w", err)
	}
	prefix := "dlock-torture:" + randomHex(4) + ":"
	if cmd.Flags().Changed("prefix") {
		prefix = a.conn.prefix + "torture:" + randomHex(4) + ":"
	}
	if strings.ContainsAny(prefix, "{}") {
		return usagef("--prefix %q: must not contain '{' or '}'", a.conn.prefix)
	}
	seed := o.seed
	if !cmd.Flags().Changed("seed") {
		seed = uint64(time.Now().UnixNano())
	}
	env := torture.Env{Worker: []string{self}, Prefix: prefix, Seed: seed, Progress: a.stderr, ResAddr: o.resource}

	// failovers need a topology: make torture
	scenarios, err := pickScenarios(torture.ClientScenarios(0), torture.OneServerScenarios(0), o.scenarios, o.local)
	if err != nil {
		return err
	}
	per := (o.duration / time.Duration(len(scenarios))).Round(100 * time.Millisecond)
	stretched := per < minScenario
	per = max(per, minScenario)
	var total time.Duration
	for i := range scenarios {
		// The profile's durations, made with 0, are each scenario's least.
		stretched = stretched || scenarios[i].Duration > per
		scenarios[i].Duration, scenarios[i].Workers = max(per, scenarios[i].Duration), o.workers
		total += scenarios[i].Duration
	}
	// Said before Redis is looked at: the plan is the command line's, and
	// a run that stops at the connection has still told it.
	if stretched {
		fmt.Fprintf(a.stderr, "torture: --duration %v is shorter than the scenarios need (each at least %v, some longer): %s; %v in all\n",
			o.duration, minScenario, scenarioPlan(scenarios, per), total)
	}
	lockDesc := "a throwaway redis-server, restarted and starved by the server-side scenarios"
	if !o.local {
		t, err := a.tortureTarget(ctx, cmd, prefix, o.yes)
		if err != nil {
			return err
		}
		env.Redis = t
		lockDesc = fmt.Sprintf("%s db %d, keys under %q (deleted at the end)", t.Addr, t.DB, prefix)
	}

	resDesc := "a throwaway redis-server"
	if o.resource != "" {
		if err := a.checkResource(ctx, o.resource, prefix, o.yes); err != nil {
			return err
		}
		resDesc = o.resource + " db 0"
	}
	if o.local || o.resource == "" {
		if _, err := exec.LookPath("redis-server"); err != nil {
			what := "the protected resource needs a second Redis: give --resource host:port, or"
			if o.local {
				what = "--local needs"
			}
			return fmt.Errorf("torture: %s redis-server on PATH; install it: %s", what, redistest.InstallHint)
		}
	}
	dir, err := os.MkdirTemp("", "dlock-torture-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	env.Dir = dir

	fmt.Fprintf(a.stderr, "torture: locks: %s\n", lockDesc)
	fmt.Fprintf(a.stderr, "torture: protected resource: %s\n", resDesc)
	fmt.Fprintf(a.stderr, "torture: %d scenario(s), %v in all, %d workers, seed %d\n", len(scenarios), total, o.workers, seed)
	if !o.local {
		fmt.Fprintln(a.stderr, "torture: a failover you trigger meanwhile is measured too; the run cannot know of it, so an overlap it causes counts as a violation")
	}

	var results []torture.Result
	var problems []string
	for i, sc := range scenarios {
		if ctx.Err() != nil {
			break
		}
		faults := strings.Join(sc.Faults, ", ")
		if sc.Reset > 0 {
			faults = strings.TrimPrefix(faults+", "+torture.FaultReset, ", ")
		}
		fmt.Fprintf(a.stderr, "torture: [%d/%d] %s, %v: %s\n", i+1, len(scenarios), sc.Name, sc.Duration, faults)
		start := time.Now()
		h, err := torture.Run(ctx, env, sc)
		if err != nil && h.Start == 0 { // it never started: nothing to judge
			if ctx.Err() != nil {
				break
			}
			if len(results) > 0 {
				torture.WriteTable(a.stdout, results)
			}
			return fmt.Errorf("torture: %s: %w", sc.Name, err)
		}
		if err != nil {
			// The workers misbehaved (output the runner could not read,
			// a worker that would not stop): the history may lack some.
			fmt.Fprintf(a.stderr, "torture: %v\n", err)
			problems = append(problems, sc.Name+": worker errors, its verdict may be incomplete")
		}
		v := torture.Check(h)
		if ctx.Err() != nil {
			sc.Name += " (interrupted)"
		} else if v.Holds == 0 {
			problems = append(problems, fmt.Sprintf("%s: no worker got a lock (failed attempts: %v): it tested nothing", sc.Name, v.Attempts))
		}
		results = append(results, torture.Result{Scenario: sc, Seed: seed, Verdict: v, Elapsed: time.Since(start)})
	}
	torture.WriteTable(a.stdout, results)

	if n := torture.Violations(results); n > 0 {
		fmt.Fprintf(a.stderr, "torture: %d violation(s) of dlock's contract, each printed above: rerun a scenario with --seed %d --scenario NAME (the faults' choices repeat, not their timing)\n", n, seed)
		if !o.local {
			fmt.Fprintln(a.stderr, "torture: if you triggered a failover during the run, overlaps it caused are among them")
		}
		return &exitError{code: exitViolations, err: fmt.Errorf("torture: %d violation(s)", n)}
	}
	if ctx.Err() != nil {
		return &exitError{code: exitSignal + int(syscall.SIGINT), err: errors.New("torture interrupted: its workers were stopped and its keys deleted")}
	}
	if len(problems) > 0 {
		return fmt.Errorf("torture: %s", strings.Join(problems, "; "))
	}
	return nil
}

// pickScenarios keeps the scenarios named, in the profile's order: of
// client's, or of local's with --local (local adds those that restart or
// fill a server of the run's own).
func pickScenarios(client, local []torture.Scenario, names []string, isLocal bool) ([]torture.Scenario, error) {
	all := client
	if isLocal {
		all = local
	}
	if len(names) == 0 {
		return all, nil
	}
	var known, localOnly []string
	for _, s := range client {
		known = append(known, s.Name)
	}
	for _, s := range local {
		if !slices.Contains(known, s.Name) {
			localOnly = append(localOnly, s.Name)
		}
	}
	for _, n := range names {
		switch {
		case slices.Contains(localOnly, n) && !isLocal:
			return nil, usagef("--scenario %q needs --local: it runs only on a throwaway redis-server of the run's own, which it may restart, fill or force", n)
		case !slices.Contains(known, n) && !slices.Contains(localOnly, n):
			return nil, usagef("--scenario %q: want one of %s; with --local: %s", n, strings.Join(known, ", "), strings.Join(localOnly, ", "))
		}
	}
	var out []torture.Scenario
	for _, s := range all {
		if slices.Contains(names, s.Name) {
			out = append(out, s)
		}
	}
	return out, nil
}

// scenarioPlan says how long the scenarios run: those that run per, then
// each that runs longer.
func scenarioPlan(scs []torture.Scenario, per time.Duration) string {
	var at, longer []string
	for _, s := range scs {
		if s.Duration == per {
			at = append(at, s.Name)
		} else {
			longer = append(longer, fmt.Sprintf("%s %v", s.Name, s.Duration))
		}
	}
	switch len(at) {
	case 0:
	case 1:
		longer = append([]string{fmt.Sprintf("%s %v", at[0], per)}, longer...)
	default:
		longer = append([]string{fmt.Sprintf("%d at %v", len(at), per)}, longer...)
	}
	return strings.Join(longer, ", ")
}

// tortureTarget resolves the connection flags to the one Redis server the
// run takes its locks on, checks that it answers, and that its database holds
// no keys but the run's own unless yes.
func (a *app) tortureTarget(ctx context.Context, cmd *cobra.Command, prefix string, yes bool) (*torture.Target, error) {
	o, err := a.conn.options(a.getenv, a.promptPassword)
	if err != nil {
		return nil, err
	}
	a.conn.warnURLPassword(a.stderr)
	switch {
	case a.conn.cluster || a.conn.masterName != "" || len(o.Addrs) != 1:
		return nil, usagef("dlock torture runs against one Redis server; Sentinel and Cluster, failovers included, are run by `make torture` in dlock's repository, not by this command")
	case o.TLSConfig != nil:
		return nil, usagef("dlock torture does not speak TLS yet (its fault proxies forward plain TCP); `make torture` in dlock's repository runs the same scenarios on servers of its own")
	case o.Dialer != nil:
		return nil, usagef("dlock torture needs host:port, not a unix socket: its fault proxies forward TCP")
	}
	t := &torture.Target{Addr: o.Addrs[0], Username: o.Username, Password: o.Password, DB: o.DB}
	rdb := redis.NewClient(&redis.Options{MaintNotificationsConfig: noMaintNotifications(), Addr: t.Addr, Username: t.Username, Password: t.Password, DB: t.DB,
		DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout, ContextTimeoutEnabled: true,
		// One dial, not go-redis' twenty retried ones: a wrong port is told
		// within --timeout (see app.probe).
		MaxRetries: -1, DialerRetries: 1})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		given := connGiven(cmd.Flags()) || firstEnv(a.getenv, "DLOCK_URL", "REDIS_URL") != ""
		if !given {
			return nil, fmt.Errorf("torture: no Redis answers at %s, the default address (%v): name yours with -u redis://host:port/db or --addr, or run `dlock torture --local` to start a throwaway redis-server", t.Addr, err)
		}
		return nil, fmt.Errorf("torture: Redis at %s: %w", t.Addr, err)
	}
	if err := a.checkForeign(ctx, rdb, fmt.Sprintf("database %d of %s", t.DB, t.Addr), prefix, yes); err != nil {
		return nil, err
	}
	return t, nil
}

// checkResource checks the Redis named by --resource as tortureTarget checks
// the locks'.
func (a *app) checkResource(ctx context.Context, addr, prefix string, yes bool) error {
	rdb := redis.NewClient(&redis.Options{MaintNotificationsConfig: noMaintNotifications(), Addr: addr, DialTimeout: a.conn.timeout, ReadTimeout: a.conn.timeout,
		WriteTimeout: a.conn.timeout, ContextTimeoutEnabled: true})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("torture: --resource %s: %w", addr, err)
	}
	return a.checkForeign(ctx, rdb, "database 0 of "+addr+" (--resource)", prefix, yes)
}

// foreignScanLimit bounds the keys checkForeign reads with SCAN when DBSIZE
// is not allowed.
const foreignScanLimit = 1000

// checkForeign refuses a database that holds keys outside prefix, unless
// yes. The prefix is new, so every key there is foreign: DBSIZE counts them,
// SCAN names a few, and counts them, up to a bound, where an ACL forbids
// DBSIZE.
func (a *app) checkForeign(ctx context.Context, rdb *redis.Client, where, prefix string, yes bool) error {
	var sample []string
	var scanned int
	var cursor uint64
	var scanErr error
	for {
		keys, next, err := rdb.Scan(ctx, cursor, "*", 200).Result()
		if err != nil {
			scanErr = err
			break
		}
		for _, k := range keys {
			if !strings.HasPrefix(k, prefix) {
				scanned++
				if len(sample) < 3 {
					sample = append(sample, fmt.Sprintf("%q", k))
				}
			}
		}
		if cursor = next; cursor == 0 || scanned >= foreignScanLimit {
			break
		}
	}
	size, sizeErr := rdb.DBSize(ctx).Result()
	var count string
	switch {
	case sizeErr == nil:
		if size == 0 {
			return nil
		}
		count = fmt.Sprint(size)
	case scanErr != nil:
		if ctx.Err() != nil { // interrupted: not a reason to run
			return ctx.Err()
		}
		if yes {
			fmt.Fprintf(a.stderr, "torture: cannot tell whether %s holds other keys (%v); running as --yes says\n", where, sizeErr)
			return nil
		}
		return fmt.Errorf("torture: cannot tell whether %s holds other keys: SCAN: %v; DBSIZE: %v (--yes runs anyway)", where, scanErr, sizeErr)
	case scanned == 0:
		return nil
	case cursor != 0:
		count = fmt.Sprintf("at least %d", scanned)
	default:
		count = fmt.Sprint(scanned)
	}
	names := ""
	if len(sample) > 0 {
		if count != fmt.Sprint(len(sample)) {
			sample = append(sample, "…")
		}
		names = " (" + strings.Join(sample, ", ") + ")"
	}
	if yes {
		fmt.Fprintf(a.stderr, "torture: %s holds %s other key(s)%s; --yes: running anyway, writing and deleting only keys under %q\n", where, count, names, prefix)
		return nil
	}
	return usagef("%s holds %s key(s) that are not the run's%s: dlock torture writes and deletes only keys under %q, but runs on a database in use only with --yes; better, give it an empty one (-u redis://host:port/15)", where, count, names, prefix)
}
