package torture

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
)

// Scenario is one run: which lock, which faults, how long.
type Scenario struct {
	Name string
	// Lock is LockDlock or one of PlantedLocks.
	Lock string
	// Faults are the kinds the nemesis draws from, one at a time; FaultReset
	// is injected by the workers themselves (see Reset).
	Faults  []string
	Workers int
	Names   int
	TTL     time.Duration
	// Wait is every Acquire's WithWait (default 4×TTL).
	Wait     time.Duration
	Duration time.Duration
	// Work bounds an ordinary critical section (default 3 ms); Long is the
	// share of them that last longer than the TTL instead.
	Work time.Duration
	Long float64
	// Reset is the chance of a reset after each lock command (FaultReset).
	Reset float64
	// Persist starts the lock's Redis with appendfsync always.
	Persist bool
	// Durable asks dlock for WithDurableGrant (on Valkey, whatever the
	// run's server: Debian's Redis 7.0 has no WAITAOF).
	Durable bool
	// Fsync is the lock's Redis' appendfsync under the crash faults:
	// everysec when "".
	Fsync string
	// Topology is "" (one Redis, a proxy per worker), "sentinel" or
	// "cluster"; Replicas asks dlock for WithReplicas.
	Topology string
	Replicas int
	// Permits makes every acquisition take one of Permits permits
	// (dlock.WithPermits): Check then allows up to that many holders of a name
	// at once, and the workers skip the fenced register, which admits one.
	Permits int
	// Shared is the share of acquisitions that are read locks
	// (dlock.WithShared): Check lets reads overlap reads and nothing else.
	Shared float64
	// Nodes runs the workers over that many independent Redis primaries
	// the run starts, with LockRedlock or LockRedlockQuorum1 (redlock.go).
	Nodes int
}

// Target is a Redis the user names, for `dlock torture`.
type Target struct {
	Addr, Username, Password string
	DB                       int
}

// Env is where a scenario runs.
type Env struct {
	// Worker starts a worker process: the binary and its arguments. The
	// process must call WorkerMain when IsWorker.
	Worker []string
	// Dir holds the servers' files.
	Dir string
	// Redis is the user's lock Redis; nil starts one (and allows the
	// server-side faults).
	Redis *Target
	// ResAddr is the protected resource's Redis; "" starts one.
	ResAddr string
	// Prefix keys everything the run writes (default "torture:").
	Prefix string
	Seed   uint64
	// Progress, if set, gets a line per fault.
	Progress io.Writer
	// Sentinel and Cluster are the topology a scenario with Topology
	// "sentinel" or "cluster" runs on, started by the caller (a test: see
	// failover.go) and not stopped by Run; the nemesis fails it over.
	Sentinel *redistest.SentinelSetup
	Cluster  *redistest.ClusterSetup
}

// Run runs sc and returns what happened, ready for Check.
func Run(ctx context.Context, env Env, sc Scenario) (History, error) {
	r := &run{env: env, sc: sc, rng: rand.New(rand.NewPCG(env.Seed, 1)), grants: make(chan *proc, 1), handed: make(chan string, 1)}
	if r.env.Prefix == "" {
		r.env.Prefix = "torture:"
	}
	defer r.cleanup()
	if err := r.start(ctx); err != nil {
		return History{}, err
	}
	r.h.Start, r.h.TTL, r.h.Permits, r.h.Wait = Now(), sc.TTL, sc.Permits, r.wait()
	for i := range sc.Workers {
		if err := r.spawn(i); err != nil {
			return History{}, err
		}
	}
	stopWatch := r.watchSentinel(ctx)
	r.nemesis(ctx)
	r.h.Stopping = Now()
	r.stop()
	stopWatch() // switches while the workers stopped count too
	r.h.Stop = Now()
	acc, err := NewResource(r.res, r.env.Prefix+"res:").Accesses(context.Background())
	if err != nil {
		return History{}, err
	}
	r.h.Accesses = acc
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) > 0 {
		return r.h, fmt.Errorf("torture: %s: %d worker errors, the first: %s", sc.Name, len(r.errs), r.errs[0])
	}
	return r.h, nil
}

type run struct {
	env Env
	sc  Scenario
	rng *rand.Rand // the nemesis'

	// planned: a failover of the nemesis is under way; after it, planned
	// is false again, plannedGen counts it and plannedTo is the primary it
	// left (see watchSentinel).
	planned    bool
	plannedGen int
	plannedTo  string

	lockSrv   *redistest.Server // nil when the user named the Redis
	fsyncLog  string            // where the lock's Redis logs its fsyncs (crashEnv), for FaultCrash
	resSrv    *redistest.Server
	res       *redis.Client
	lockAddr  string
	proxies   []*faultproxy.Proxy // one per worker slot
	lockAdmin *redis.Client       // the nemesis' own connection to the lock's Redis
	nodes     []*redistest.Server // Scenario.Nodes: the Redlock's primaries

	nextID  int
	readers sync.WaitGroup

	mu     sync.Mutex // guards what the readers fill in
	h      History
	procs  []*proc // by slot: the live process
	open   map[int]int
	errs   []string
	grants chan *proc // a worker just got a lock (dropped when nobody waits)
	// handed: a worker's Release returned "ok" on this name, which hands
	// the lock to the first waiter (dropped when nobody waits).
	handed chan string
}

// proc is one worker process.
type proc struct {
	id, slot int
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	exited   chan struct{}
	// guarded by run.mu
	waiting, holding string // the name waited for, held
}

func (r *run) start(ctx context.Context) error {
	if r.sc.Nodes > 0 {
		if err := r.startNodes(ctx); err != nil {
			return err
		}
	} else if r.sc.Topology != "" {
		if err := r.checkTopology(); err != nil {
			return err
		}
	} else if r.env.Redis == nil {
		var args, env []string
		if r.sc.Persist {
			args = []string{"--appendonly", "yes", "--appendfsync", "always"}
		}
		dir, err := os.MkdirTemp(r.env.Dir, "lock-")
		if err != nil {
			return err
		}
		flavor := ""
		if r.crashes() {
			// A machine crash needs what the server's fsyncs covered:
			// see crashEnv.
			args = []string{"--appendonly", "yes", "--appendfsync", cmp.Or(r.sc.Fsync, "everysec")}
			if env, r.fsyncLog, err = crashEnv(ctx, dir); err != nil {
				return err
			}
		}
		if r.sc.Durable {
			flavor = "valkey"
		}
		if r.lockSrv, err = redistest.LaunchFlavorEnv(ctx, flavor, dir, env, args...); err != nil {
			return err
		}
		r.lockAddr = r.lockSrv.Addr
		r.lockAdmin = redis.NewClient(&redis.Options{Addr: r.lockAddr})
	} else {
		r.lockAddr = r.env.Redis.Addr
	}
	resAddr := r.env.ResAddr
	if resAddr == "" {
		dir, err := os.MkdirTemp(r.env.Dir, "res-")
		if err != nil {
			return err
		}
		if r.resSrv, err = redistest.Launch(ctx, dir); err != nil {
			return err
		}
		resAddr = r.resSrv.Addr
	}
	r.res = redis.NewClient(&redis.Options{Addr: resAddr})
	r.h.TTL = r.sc.TTL
	r.open = map[int]int{}
	r.procs = make([]*proc, r.sc.Workers)
	for range r.sc.Workers {
		if r.sc.Topology != "" || r.sc.Nodes > 0 {
			break // workers follow the topology, or reach the nodes: no proxy
		}
		p, err := faultproxy.New(r.lockAddr)
		if err != nil {
			return err
		}
		r.proxies = append(r.proxies, p)
	}
	return nil
}

// readTimeout is the workers' go-redis read timeout: a little under the TTL,
// so that a cut connection fails a command before the lease's deadline.
// wait is every worker's WithWait.
func (r *run) wait() time.Duration { return cmp.Or(r.sc.Wait, 4*r.sc.TTL) }

// crashes reports whether the nemesis crashes the lock's Redis as a machine
// crash would (FaultCrash, FaultCrashDurable).
func (r *run) crashes() bool {
	return slices.Contains(r.sc.Faults, FaultCrash) || slices.Contains(r.sc.Faults, FaultCrashDurable)
}

func (r *run) readTimeout() time.Duration { return max(r.sc.TTL*4/5, 100*time.Millisecond) }

// spawn starts a worker process in slot.
func (r *run) spawn(slot int) error {
	r.mu.Lock()
	r.nextID++
	id := r.nextID
	r.mu.Unlock()
	names := make([]string, max(r.sc.Names, 1))
	for i := range names {
		names[i] = "n" + strconv.Itoa(i)
	}
	cfg := workerConfig{
		ID: id, Lock: r.sc.Lock, ResAddr: r.res.Options().Addr,
		Prefix: r.env.Prefix, Names: names, TTL: r.sc.TTL, Wait: r.wait(), ReadTimeout: r.readTimeout(),
		Work: cmp.Or(r.sc.Work, 3*time.Millisecond), Long: r.sc.Long, Reset: r.sc.Reset, Replicas: r.sc.Replicas, Seed: r.env.Seed,
		Permits: r.sc.Permits, Shared: r.sc.Shared,
	}
	if r.sc.Durable {
		// Room below the read timeout for WAITAOF's answer (see
		// dlock's checkWaitRoom), and at most a third of the TTL, which
		// dlock asks (each renewal waits for it): the fsync comes within
		// a cron tick or two.
		cfg.Durable = min(r.readTimeout()/2, r.sc.TTL/3)
	}
	switch {
	case r.sc.Nodes > 0:
		cfg.Addrs = r.nodeAddrs()
	case r.sc.Topology != "":
		r.topologyWorker(&cfg)
	default:
		cfg.Addrs = []string{r.proxies[slot].Addr()}
	}
	if t := r.env.Redis; t != nil {
		cfg.Username, cfg.Password, cfg.DB = t.Username, t.Password, t.DB
	}
	b, _ := json.Marshal(cfg)
	cmd := exec.Command(r.env.Worker[0], r.env.Worker[1:]...)
	cmd.Env = append(os.Environ(), WorkerEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	// A runner that dies must not leave a worker behind, or one stopped
	// for ever.
	cmd.SysProcAttr = redistest.ChildAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("torture: start a worker: %w", err)
	}
	p := &proc{id: id, slot: slot, cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	r.mu.Lock()
	r.procs[slot] = p
	r.mu.Unlock()
	r.readers.Add(1)
	go r.read(p, out)
	return nil
}

// read collects one worker's lines until it exits.
func (r *run) read(p *proc, out io.Reader) {
	defer r.readers.Done()
	defer close(p.exited)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			r.mu.Lock()
			r.errs = append(r.errs, fmt.Sprintf("w%d: %q", p.id, sc.Text()))
			r.mu.Unlock()
			continue
		}
		r.mu.Lock()
		switch l.Kind {
		case "wait":
			p.waiting, p.holding = l.Name, ""
		case "acq":
			p.waiting, p.holding = "", l.Hold.Name
			r.open[p.id] = len(r.h.Holds)
			r.h.Holds = append(r.h.Holds, *l.Hold)
		case "lost":
			if i, ok := r.open[p.id]; ok && r.h.Holds[i].Seq == l.Hold.Seq && r.h.Holds[i].Done == 0 {
				r.h.Holds[i].Lost, r.h.Holds[i].Cause = l.Hold.Lost, l.Hold.Cause
			}
		case "done":
			// Still "holding" for the nemesis until Release returns: a
			// fault inside Release is a fault of the holder.
			if i, ok := r.open[p.id]; ok {
				r.h.Holds[i] = *l.Hold
			}
		case "end":
			p.holding = ""
			if i, ok := r.open[p.id]; ok {
				r.h.Holds[i] = *l.Hold
				delete(r.open, p.id)
			}
		case "try":
			p.waiting = ""
			r.h.Attempts = append(r.h.Attempts, *l.Attempt)
		case "fault":
			r.h.Faults = append(r.h.Faults, *l.Fault)
		}
		r.mu.Unlock()
		switch {
		case l.Kind == "acq":
			select {
			case r.grants <- p:
			default:
			}
		case l.Kind == "end" && l.Hold.Release == "ok":
			select {
			case r.handed <- l.Hold.Name:
			default:
			}
		}
	}
	_ = p.cmd.Wait()
}

// stop tells every worker to finish (EOF on stdin) and kills those that do
// not within a few seconds.
func (r *run) stop() {
	r.mu.Lock()
	procs := slices.Clone(r.procs)
	r.mu.Unlock()
	for _, p := range procs {
		_ = p.stdin.Close()
	}
	done := make(chan struct{})
	go func() { r.readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10*time.Second + 2*r.sc.TTL):
		r.mu.Lock()
		r.errs = append(r.errs, "workers did not stop within 10s of being told")
		r.mu.Unlock()
		for _, p := range procs {
			_ = resume(p.cmd.Process)
			_ = p.cmd.Process.Kill()
		}
		<-done
	}
}

func (r *run) cleanup() {
	r.mu.Lock()
	procs := slices.Clone(r.procs)
	r.mu.Unlock()
	for _, p := range procs {
		if p != nil {
			_ = resume(p.cmd.Process)
			_ = p.cmd.Process.Kill()
		}
	}
	r.readers.Wait()
	for _, p := range r.proxies {
		_ = p.Close()
	}
	if r.env.Redis != nil || r.env.ResAddr != "" {
		r.deleteOwn()
	}
	for _, c := range []*redis.Client{r.res, r.lockAdmin} {
		if c != nil {
			_ = c.Close()
		}
	}
	for _, s := range append([]*redistest.Server{r.lockSrv, r.resSrv}, r.nodes...) {
		if s != nil {
			s.Resume() // a node stopped by a nemesis cut short
			s.Kill()
		}
	}
}

// deleteOwn deletes the run's keys from the Redis servers the user named
// (the lock's, the resource's), and nothing else. Either may be missing: a
// run that failed to start, a lock Redis the run started itself.
func (r *run) deleteOwn() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rdbs []*redis.Client
	if t := r.env.Redis; t != nil {
		c := redis.NewClient(&redis.Options{Addr: t.Addr, Username: t.Username, Password: t.Password, DB: t.DB})
		defer c.Close()
		rdbs = append(rdbs, c)
	}
	if r.env.ResAddr != "" && r.res != nil {
		rdbs = append(rdbs, r.res)
	}
	// The prefix is matched as a glob: its special characters are escaped,
	// and each key is checked again, so that no key of the user's goes.
	pattern := globEscape(r.env.Prefix) + "*"
	for _, rdb := range rdbs {
		it := rdb.Scan(ctx, 0, pattern, 500).Iterator()
		for it.Next(ctx) {
			if strings.HasPrefix(it.Val(), r.env.Prefix) {
				rdb.Unlink(ctx, it.Val())
			}
		}
	}
}

// globEscape escapes the characters that Redis' glob patterns (SCAN MATCH)
// give a meaning.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\^-`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func (r *run) progress(format string, args ...any) {
	if r.env.Progress != nil {
		fmt.Fprintf(r.env.Progress, "  %6.1fs  %s\n", float64(Now()-r.h.Start)/1e9, fmt.Sprintf(format, args...))
	}
}

func (r *run) fault(f Fault) {
	r.mu.Lock()
	r.h.Faults = append(r.h.Faults, f)
	r.mu.Unlock()
	who := "all"
	if f.Worker >= 0 {
		who = "w" + strconv.Itoa(f.Worker)
	}
	if f.Worker < 0 && f.Kind != FaultBlackhole && f.Kind != FaultLatency {
		who = "lock Redis"
	}
	r.progress("%-13s %-10s %6.0fms %s", f.Kind, who, float64(f.To-f.From)/1e6, f.Note)
}

var errNoTarget = errors.New("no worker to fault")
