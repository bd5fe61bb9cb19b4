package redlock_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redlock"
)

// A Redlock over three independent primaries, used through dlock.Locker.
// (Compiled, not run: it needs three servers.)
func Example() {
	var rdbs []redis.UniversalClient
	for _, addr := range []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"} {
		rdbs = append(rdbs, redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}))
	}
	r, err := redlock.New(rdbs, redlock.WithDefaultOwner("billing-worker"))
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(context.Background())

	var locker dlock.Locker = r
	ctx := context.Background()
	err = locker.Do(ctx, "invoice:42", func(ctx context.Context) error {
		l, _ := dlock.FromContext(ctx)
		fences := l.(*redlock.Lock).Fences() // one per node, 0 where not granted
		return writeInvoice(ctx, fences)
	}, dlock.WithTTL(10*time.Second), dlock.WithWait(2*time.Second))
	switch {
	case errors.Is(err, dlock.ErrNotObtained):
		// busy: another worker has it
	case errors.Is(err, redlock.ErrNoQuorum):
		// too many nodes down
	case err != nil:
		log.Print(err)
	}
}

func writeInvoice(context.Context, []int64) error { return nil }
