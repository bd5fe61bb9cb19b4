package torture

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/scripts"
)

// WorkerEnv is the environment variable that makes a process a worker: it
// holds the worker's configuration as JSON. A binary that can run workers
// (the CLI, a test binary) checks it first thing: see WorkerMain.
const WorkerEnv = "DLOCK_TORTURE_WORKER"

// workerConfig is what the runner tells one worker process.
type workerConfig struct {
	ID       int      `json:"id"`
	Lock     string   `json:"lock"`
	Addrs    []string `json:"addrs"` // the lock's Redis, through the worker's proxy where there is one
	Master   string   `json:"master,omitempty"`
	Cluster  bool     `json:"cluster,omitempty"`
	Username string   `json:"username,omitempty"`
	Password string   `json:"password,omitempty"`
	DB       int      `json:"db,omitempty"`
	ResAddr  string   `json:"res"`
	Prefix   string   `json:"prefix"`
	Names    []string `json:"names"`

	TTL         time.Duration `json:"ttl"`
	Wait        time.Duration `json:"wait"`
	ReadTimeout time.Duration `json:"read_timeout"`
	// Work bounds an ordinary critical section; Long is the share of them
	// that last longer than the TTL instead.
	Work time.Duration `json:"work"`
	Long float64       `json:"long"`
	// Reset is the chance that a lock command's connection is reset right
	// after the command was written (Redis runs it, the reply is lost).
	Reset    float64 `json:"reset,omitempty"`
	Replicas int     `json:"replicas,omitempty"`
	Permits  int     `json:"permits,omitempty"`
	// Durable is WithDurableGrant's timeout; 0: not asked.
	Durable time.Duration `json:"durable,omitempty"`
	// Shared is the share of acquisitions that are read locks.
	Shared float64 `json:"shared,omitempty"`
	Seed   uint64  `json:"seed"`
	// ClusterReload is the cluster client's ClusterStateReloadInterval: it
	// reloads its slot map only on MOVED/ASK or that often (60 s by default),
	// and keeps dialing a dead primary until it does.
	ClusterReload time.Duration `json:"cluster_reload,omitempty"`
}

// line is one line of a worker's output.
type line struct {
	Kind    string   `json:"k"` // wait, acq, lost, done, end, try, fault
	Name    string   `json:"n,omitempty"`
	Hold    *Hold    `json:"h,omitempty"`
	Attempt *Attempt `json:"a,omitempty"`
	Fault   *Fault   `json:"f,omitempty"`
}

// IsWorker tells whether this process was started as a worker.
func IsWorker() bool { return os.Getenv(WorkerEnv) != "" }

// WorkerMain runs this process as the worker its environment describes,
// until its stdin ends, and returns its exit code.
func WorkerMain() int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(os.Getenv(WorkerEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "torture worker:", err)
		return 2
	}
	// The runner closes stdin to stop a worker, and so does a runner that
	// dies; the timeout bounds the worker whatever happens.
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	out := bufio.NewWriter(os.Stdout)
	if err := runWorker(ctx, cfg, out); err != nil {
		fmt.Fprintln(os.Stderr, "torture worker:", err)
		return 1
	}
	return 0
}

type worker struct {
	cfg workerConfig
	rng *rand.Rand

	mu  sync.Mutex // guards out and rng: resets are injected from go-redis' goroutines
	out *bufio.Writer
}

// emit writes one line and flushes it at once: a worker can be killed at any
// moment, and what it did must be on record before.
func (w *worker) emit(l line) {
	b, _ := json.Marshal(l)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.out.Write(b)
	w.out.WriteByte('\n')
	w.out.Flush()
}

func (w *worker) chance(p float64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rng.Float64() < p
}

func (w *worker) intN(n int64) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rng.Int64N(n)
}

func runWorker(ctx context.Context, cfg workerConfig, out *bufio.Writer) error {
	w := &worker{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.ID))), out: out}
	opts := &redis.UniversalOptions{
		Addrs: cfg.Addrs, MasterName: cfg.Master, IsClusterMode: cfg.Cluster,
		Username: cfg.Username, Password: cfg.Password, DB: cfg.DB,
		ReadTimeout: cfg.ReadTimeout, WriteTimeout: cfg.ReadTimeout, DialTimeout: cfg.ReadTimeout,
	}
	if cfg.Reset > 0 {
		opts.Dialer = w.dial
	}
	var rdb redis.UniversalClient
	switch {
	case nodeLock(cfg.Lock): // a client per node, in newNodeLocker
	case cfg.Cluster:
		co := opts.Cluster()
		co.ClusterStateReloadInterval = cfg.ClusterReload
		rdb = redis.NewClusterClient(co)
	default:
		rdb = redis.NewUniversalClient(opts)
	}
	if rdb != nil {
		defer rdb.Close()
	}
	res := redis.NewClient(&redis.Options{Addr: cfg.ResAddr})
	defer res.Close()
	resource := NewResource(res, cfg.Prefix+"res:")
	var lk locker
	var err error
	if nodeLock(cfg.Lock) {
		lk, err = newNodeLocker(cfg, fmt.Sprintf("w%d", cfg.ID))
	} else {
		lk, err = newLocker(cfg.Lock, rdb, fmt.Sprintf("w%d", cfg.ID), cfg.Prefix, cfg.TTL, cfg.Wait, cfg.Replicas, cfg.Permits, cfg.Durable)
	}
	if err != nil {
		return err
	}
	defer lk.Close(context.Background())

	for seq := 0; ctx.Err() == nil; seq++ {
		name := cfg.Names[w.intN(int64(len(cfg.Names)))]
		w.emit(line{Kind: "wait", Name: name})
		h := Hold{Worker: cfg.ID, Seq: seq, Name: name, Asked: Now()}
		var l held
		if sl, ok := lk.(sharedLocker); ok && cfg.Shared > 0 && w.chance(cfg.Shared) {
			h.Shared = true
			l, err = sl.AcquireShared(ctx, name)
		} else {
			l, err = lk.Acquire(ctx, name)
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			a := Attempt{Worker: cfg.ID, Name: name, Asked: h.Asked, End: Now(), Outcome: attemptOutcome(err)}
			if a.Outcome != "busy" {
				a.Err = err.Error()
				time.Sleep(10 * time.Millisecond) // Redis is down or cut: do not spin
			}
			w.emit(line{Kind: "try", Attempt: &a})
			continue
		}
		h.Got, h.Fence = Now(), l.Fence()
		w.emit(line{Kind: "acq", Hold: &h})
		w.hold(&h, l, resource)
		w.emit(line{Kind: "end", Hold: &h})
	}
	return nil
}

// hold is the critical section: a fenced read, some work, a fenced write,
// then Release. It goes on to the write after the lock's context ended, as a
// careless holder would: the resource's fence check is what stops it.
func (w *worker) hold(h *Hold, l held, res *Resource) {
	var lost int64
	var cause error
	var mu sync.Mutex
	lctx := l.Context()
	if lctx.Err() != nil {
		// Ended when the holder first looked, before any work: a lease
		// that ran out while this process was stopped after Acquire
		// returned (Context looks at the deadline). The holder never
		// believed in it: its belief ends where it began, and Check
		// counts it as no holder when a pause of this worker explains
		// it.
		lost, cause = h.Got, context.Cause(lctx)
	}
	stop := context.AfterFunc(lctx, func() {
		mu.Lock()
		if lost == 0 {
			lost, cause = Now(), context.Cause(lctx)
		}
		at, why := lost, cause
		mu.Unlock()
		// On record at once: a worker killed later in its critical
		// section had stopped believing in its lock here.
		if c := causeOf(why); c != "released" {
			w.emit(line{Kind: "lost", Hold: &Hold{Worker: h.Worker, Seq: h.Seq, Lost: at, Cause: c}})
		}
	})
	defer stop()
	fence := h.Fence
	if w.cfg.Lock == LockNoFence {
		fence = 0
	}
	rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// The register admits one holder: holders of permits, several at once
	// by right, leave it alone, and Check counts them instead.
	// A reader's fence orders it against writers, not against the other
	// readers: the register, which refuses any fence below the largest it
	// saw, would refuse the older of two readers. The overlap check judges
	// reads.
	var v int64
	if w.cfg.Permits == 0 && !h.Shared {
		v, h.Read = res.Read(rctx, h.Worker, h.Name, fence)
	}
	work := time.Duration(w.intN(int64(w.cfg.Work) + 1))
	if w.chance(w.cfg.Long) {
		work = w.cfg.TTL + time.Duration(w.intN(int64(w.cfg.TTL/2)))
	}
	time.Sleep(work)
	if h.Read == "ok" {
		h.Write = res.Write(rctx, h.Worker, h.Name, fence, v)
	}
	h.Done = Now()
	mu.Lock()
	if lost != 0 && lost < h.Done {
		h.Lost, h.Cause = lost, causeOf(cause)
	}
	mu.Unlock()
	// On record before Release is called: a worker killed during Release
	// has ended its hold all the same.
	w.emit(line{Kind: "done", Hold: h})
	rctx2, cancel2 := context.WithTimeout(context.Background(), w.cfg.TTL+2*w.cfg.ReadTimeout)
	defer cancel2()
	err := l.Release(rctx2)
	h.Released = Now()
	h.Release = releaseOutcome(err)
	h.Final = finalOf(l.Context(), err)
}

// dial connects to Redis through a connection that resets itself, now and
// then, right after a lock command was written to it: the command reaches
// Redis, its reply is lost, go-redis sends it again.
func (w *worker) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &resetConn{Conn: c, w: w}, nil
}

type resetConn struct {
	net.Conn
	w *worker
}

// The scripts whose reply a reset loses, by what the fault is called.
var resetAfter = []struct {
	sha  []byte
	what string
}{
	{[]byte(scripts.Release.Hash()), "release"},
	{[]byte(scripts.Refresh.Hash()), "refresh"},
	{[]byte(scripts.Acquire.Hash()), "acquire"},
	{[]byte(scripts.SemRelease.Hash()), "release"},
	{[]byte(scripts.SemRefresh.Hash()), "refresh"},
	{[]byte(scripts.SemAcquire.Hash()), "acquire"},
}

func (c *resetConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err != nil {
		return n, err
	}
	for _, s := range resetAfter {
		if bytes.Contains(b, s.sha) && c.w.chance(c.w.cfg.Reset) {
			at := Now()
			if tc, ok := c.Conn.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Conn.Close()
			c.w.emit(line{Kind: "fault", Fault: &Fault{Kind: FaultReset, Worker: c.w.cfg.ID, From: at, To: Now(), Note: "after " + s.what}})
			break
		}
	}
	return n, err
}
