package election_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/election"
)

// One candidate campaigns, leads, tells who leads, and resigns so the next
// candidate in line leads at once.
func ExampleElection_Campaign() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	e, err := election.New(locker, "scheduler", election.WithIdentity("web-1"), election.WithTTL(5*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	lead, err := e.Campaign(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	who, _ := e.Leader(ctx)
	fmt.Println("leader:", who.Identity, "fence matches:", who.Fence == lead.Fence())
	// The leader's work runs under lead.Context(): it ends if the
	// leadership is lost.
	fmt.Println("resigned:", lead.Resign(ctx) == nil)
	// Output:
	// leader: web-1 fence matches: true
	// resigned: true
}

// Run in the manner of client-go's leaderelection: the work runs while this
// candidate leads, and Run campaigns again after a term ends, until its
// context ends.
func ExampleElection_Run() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(context.Background())
	e, _ := election.New(locker, "reconciler", election.WithIdentity("pod-a"))

	ctx, stop := context.WithCancel(context.Background())
	err := e.Run(ctx, election.Callbacks{
		OnStartedLeading: func(ctx context.Context) {
			fmt.Println("leading: reconciling until the term ends")
			stop() // here: the process is shutting down
			<-ctx.Done()
		},
		OnStoppedLeading: func() { fmt.Println("stopped leading") },
	})
	fmt.Println("Run returned:", err)
	// Output:
	// leading: reconciling until the term ends
	// stopped leading
	// Run returned: <nil>
}

// Observe reports who leads now, then every change: here a resignation and a
// new leader.
func ExampleElection_Observe() {
	ctx := context.Background()
	locker := dlocktest.MustNew() // the double has Inspect, as the Client does
	defer locker.Close(ctx)
	a, _ := election.New(locker, "scheduler", election.WithIdentity("a"), election.WithObserveInterval(10*time.Millisecond))
	b, _ := election.New(locker, "scheduler", election.WithIdentity("b"))

	lead, _ := a.Campaign(ctx)
	octx, stop := context.WithCancel(ctx)
	changes, _ := a.Observe(octx)
	fmt.Println("leader:", (<-changes).Identity)
	_ = lead.Resign(ctx)
	if (<-changes).Identity == "" {
		fmt.Println("leader: nobody")
	}
	lead, _ = b.Campaign(ctx)
	defer lead.Resign(ctx)
	fmt.Println("leader:", (<-changes).Identity)
	stop()
	for range changes { // Observe's goroutine ends when ctx does
	}
	// Output:
	// leader: a
	// leader: nobody
	// leader: b
}

// A LeaderInfo prints as a log line.
func ExampleLeaderInfo_String() {
	fmt.Println(election.LeaderInfo{Identity: "node-2", Since: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), Fence: 42})
	fmt.Println(election.LeaderInfo{})
	// Output:
	// "node-2" leads since 2026-12-02T10:00:00Z (fence 42)
	// nobody leads
}
