package dlock

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
)

// A SUBSCRIBE whose write fails leaves no channel in go-redis' record of
// the connection's subscriptions: go-redis keeps it whatever the outcome,
// and would subscribe it again when the connection comes back, behind the
// notifier's back.
func TestFailedSubscribeLeavesNoChannelBehind(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	ps := rdb.Subscribe(ctx)
	t.Cleanup(func() { _ = ps.Close() })
	srv.Kill()
	if err := (plainChannels{}).subscribe(ctx, ps, "dlock:{x}:w:c1"); err == nil {
		t.Fatal("SUBSCRIBE to a server that is down succeeded")
	}
	if s := ps.String(); strings.Contains(s, "dlock:{x}:w:c1") {
		t.Fatalf("go-redis still records the failed subscription: %s", s)
	}
}
