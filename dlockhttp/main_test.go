package dlockhttp_test

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// exampleAddr is the redis-server the Example functions use; TestMain starts
// it, since an Example has no *testing.T to start one with.
var exampleAddr string

func TestMain(m *testing.M) {
	os.Exit(redistest.RunMain(m, &exampleAddr))
}

var bg = context.Background()

// setup starts a redis-server for one test and returns a dlock client on it,
// closed at the end of the test, and a plain client to look at Redis with.
func setup(t *testing.T) (*dlock.Client, *redis.Client) {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	c := dlock.MustNew(rdb)
	t.Cleanup(func() { _ = c.Close(bg) })
	return c, rdb
}
