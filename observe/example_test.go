package observe_test

import (
	"context"
	"fmt"

	"github.com/dlock-go/dlock/observe"
)

// busyCounter counts acquisitions that found the lock busy. It embeds
// BaseObserver, so the events it does not care about are no-ops, and an
// event added later does not break its build. A Client takes it with
// dlock.WithObserver.
type busyCounter struct {
	observe.BaseObserver
	busy int
}

func (c *busyCounter) OnAcquire(_ context.Context, e observe.AcquireEvent) {
	if e.Result == observe.ResultBusy || e.Result == observe.ResultTimeout {
		c.busy++
	}
}

func Example() {
	c := &busyCounter{}
	var o observe.Observer = c // what a Client calls
	o.OnAcquire(context.Background(), observe.AcquireEvent{Name: "order:42", Result: observe.ResultAcquired})
	o.OnAcquire(context.Background(), observe.AcquireEvent{Name: "order:42", Result: observe.ResultBusy})
	o.OnRelease(context.Background(), observe.ReleaseEvent{Name: "order:42", Result: observe.ResultOK})
	fmt.Println("busy:", c.busy)
	// A metrics observer creates its series up front, so that a counter
	// that is still zero shows in a graph.
	fmt.Println(observe.AcquireResults())
	// Output:
	// busy: 1
	// [acquired busy timeout cancelled error]
}
