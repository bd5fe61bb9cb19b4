package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// demoAcquireWait bounds each worker's wait for the lock.
const demoAcquireWait = 10 * time.Second

// workerOptions are what demo tells each worker process on its command line.
type workerOptions struct {
	mode    string // "naive" or "dlock"
	id      int
	prefix  string
	users   int
	ttl     time.Duration
	work    time.Duration
	pauseAt []int // the worker freezes before the write of these sales (1-based)
}

// workerResult is what a worker reports on its last line of output.
type workerResult struct {
	Requests       int `json:"requests"`
	Sold           int `json:"sold"`
	SoldOut        int `json:"sold_out"`
	AlreadyOrdered int `json:"already_ordered"`
	GaveUp         int `json:"gave_up"`
	Frozen         int `json:"frozen"`
	ForeignDeletes int `json:"foreign_deletes"` // naive: DEL hit another's lock
	ReleaseRefused int `json:"release_refused"` // dlock: Release got ErrNotHeld
	FenceRejected  int `json:"fence_rejected"`  // dlock: the shop refused a stale fence
}

// Lines a worker writes on stdout for the demo process.
const (
	linePause  = "pause"   // freeze me now; answer on my stdin when done
	lineResult = "result " // followed by the workerResult in JSON
)

// newDemoWorkerCmd is the hidden command that demo runs its workers with:
// separate processes, so that a frozen worker is frozen whole, its lock
// renewal included, as in a stop-the-world GC pause.
func newDemoWorkerCmd(a *app) *cobra.Command {
	var o workerOptions
	cmd := &cobra.Command{
		Use:    "demo-worker",
		Short:  "One worker process of dlock demo",
		Hidden: true,
		Args:   exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.mode != "naive" && o.mode != "dlock" {
				return usagef("--mode %q: want naive or dlock", o.mode)
			}
			return a.demoWorker(cmd.Context(), o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.mode, "mode", "", "naive or dlock")
	fs.IntVar(&o.id, "id", 0, "worker number")
	fs.StringVar(&o.prefix, "keys", "", "key prefix of this demo run")
	fs.IntVar(&o.users, "users", 0, "users 1..N to take one order for each")
	durationFlag(fs, &o.ttl, "ttl", "", 0, "lock TTL")
	durationFlag(fs, &o.work, "work", "", time.Millisecond, "time between the check and the write")
	fs.IntSliceVar(&o.pauseAt, "pause-at", nil, "sales before whose write the worker freezes")
	return cmd
}

func (a *app) demoWorker(ctx context.Context, o workerOptions) error {
	rdb, err := a.redis()
	if err != nil {
		return err
	}
	defer rdb.Close()
	var lk demoLock
	if o.mode == "naive" {
		lk = &naiveLock{rdb: rdb, key: o.prefix + "naive:lock", audit: o.prefix + "naive:holder", ttl: o.ttl, worker: o.id}
	} else {
		c := dlock.MustNew(rdb, dlock.WithPrefix(o.prefix+"lock:"), dlock.WithDefaultOwner(fmt.Sprintf("demo worker %d", o.id)))
		defer func() { _ = c.Close(context.WithoutCancel(ctx)) }()
		lk = &dlockLock{c: c, ttl: o.ttl}
	}
	w := &worker{opts: o, lock: lk, shop: newShop(rdb, o.prefix), out: a.stdout, in: bufio.NewReader(a.stdin)}
	for i, n := range o.pauseAt {
		if i == 0 {
			w.pauses = map[int]bool{}
		}
		w.pauses[n] = true
	}
	// Each worker takes one order from every user in turn, as if every user
	// pressed "buy" once on every server: the same user's tries reach
	// several workers at about the same time.
	for user := 1; user <= o.users; user++ {
		if err := w.order(ctx, user); err != nil {
			return fmt.Errorf("worker %d, user %d: %w", o.id, user, err)
		}
	}
	b, err := json.Marshal(w.res)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(a.stdout, "%s%s\n", lineResult, b)
	return err
}

type worker struct {
	opts   workerOptions
	lock   demoLock
	shop   *shop
	out    io.Writer
	in     *bufio.Reader
	pauses map[int]bool
	tries  int // sales attempted: reads that found stock and no order
	res    workerResult
}

// order is one user's try: under the lock, read the stock and the user's
// orders, check, and write. The check and the write are separate steps on
// purpose: that is business logic, which the lock must protect.
func (w *worker) order(ctx context.Context, user int) error {
	w.res.Requests++
	fence, err := w.lock.acquire(ctx)
	if errors.Is(err, errGaveUp) {
		w.res.GaveUp++
		return nil
	}
	if err != nil {
		return err
	}
	stock, orders, ok, err := w.shop.read(ctx, fence, user)
	switch {
	case err != nil:
		_ = w.lock.release(ctx, &w.res)
		return err
	case !ok:
		w.res.FenceRejected++
	case orders > 0:
		w.res.AlreadyOrdered++
	case stock <= 0:
		w.res.SoldOut++
	default:
		time.Sleep(w.opts.work) // the payment provider answers
		w.tries++
		if w.pauses[w.tries] {
			w.freeze()
		}
		written, err := w.shop.write(ctx, fence, user, stock-1)
		if err != nil {
			_ = w.lock.release(ctx, &w.res)
			return err
		}
		if written {
			w.res.Sold++
		} else {
			w.res.FenceRejected++
		}
	}
	return w.lock.release(ctx, &w.res)
}

// freeze asks the demo process to stop this process (SIGSTOP) and waits for
// its answer, which it sends after SIGCONT: the whole process stands still
// meanwhile, lock renewal included, and carries on with a stale read.
func (w *worker) freeze() {
	w.res.Frozen++
	if _, err := fmt.Fprintln(w.out, linePause); err != nil {
		return
	}
	_, _ = w.in.ReadString('\n') // EOF: the demo is gone; carry on
}
