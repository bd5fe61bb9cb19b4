package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
)

// Trial is one run of an order: each locker is a worker (one dlock Client
// each, as separate instances of a service have), and each worker takes Ops
// units of stock from one row, in the order Take.
type Trial struct {
	Name    string // "wrong" or "right", for the figures
	Take    Take
	Store   *Store
	Lockers []dlock.Locker
	Row     string
	Start   int64         // the row's quantity before the trial
	Ops     int           // units each worker takes
	Work    time.Duration // between the read and the write
}

// Figures are what a trial did to the row.
type Figures struct {
	Name      string
	Committed int   // takes whose transaction committed
	Refused   int   // takes refused by the fence column (ErrStale)
	Failed    int   // takes that failed otherwise (first error in Err)
	Expected  int64 // Start less one per committed take
	Actual    int64 // the row's quantity after the trial
	Err       error // the first failure other than a refusal, if any
	Took      time.Duration
}

// Lost is the number of committed takes the row does not show: each was
// overwritten by a holder that had read the row before it was committed.
func (f Figures) Lost() int64 { return f.Actual - f.Expected }

// Run resets the row to Start, runs the workers at once, and reads the row
// back. Takes run one after another in each worker; an error does not stop a
// worker, it is counted.
func (tr Trial) Run(ctx context.Context) (Figures, error) {
	if err := tr.Store.Reset(ctx, tr.Row, tr.Start); err != nil {
		return Figures{}, fmt.Errorf("reset row %q: %w", tr.Row, err)
	}
	f := Figures{Name: tr.Name}
	var mu sync.Mutex
	var wg sync.WaitGroup
	began := time.Now()
	for _, locker := range tr.Lockers {
		wg.Go(func() {
			for range tr.Ops {
				err := tr.Take(ctx, locker, tr.Store, tr.Row, tr.Work)
				mu.Lock()
				switch {
				case err == nil:
					f.Committed++
				case errors.Is(err, ErrStale):
					f.Refused++
				default:
					f.Failed++
					if f.Err == nil {
						f.Err = err
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	f.Took = time.Since(began)
	actual, err := tr.Store.Qty(ctx, tr.Row)
	if err != nil {
		return f, fmt.Errorf("read row %q: %w", tr.Row, err)
	}
	f.Expected, f.Actual = tr.Start-int64(f.Committed), actual
	return f, nil
}

// printFigures writes the figures as a table.
func printFigures(w io.Writer, figs ...Figures) {
	fmt.Fprintf(w, "%-6s %9s %7s %6s %8s %6s %4s %7s\n", "order", "committed", "refused", "failed", "expected", "actual", "lost", "took")
	for _, f := range figs {
		fmt.Fprintf(w, "%-6s %9d %7d %6d %8d %6d %4d %7s\n", f.Name, f.Committed, f.Refused, f.Failed, f.Expected, f.Actual, f.Lost(),
			f.Took.Round(time.Millisecond))
	}
	for _, f := range figs {
		if f.Err != nil {
			fmt.Fprintf(w, "%s: first failure: %v\n", f.Name, f.Err)
		}
	}
}
