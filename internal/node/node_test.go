package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/node"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

// TestPipelineResendsNoScript: after SCRIPT FLUSH, the calls answered
// NOSCRIPT go again with their source, the others are not sent twice, and
// the commands queued by then follow the calls in both pipelines.
func TestPipelineResendsNoScript(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// Only the pttl script is loaded: its call is answered the first time.
	if err := scripts.PTTL.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	k := node.KeysOf("test:", "pipe")
	calls := []node.Call{
		node.PTTL(k, "tok"),
		node.Acquire(k, "tok", node.AcquireArgs{TTL: time.Second, Alive: time.Second, QueueExpiry: time.Second, FenceLifetime: time.Hour}),
	}
	var waits []*redis.Cmd
	replies := node.Pipeline(ctx, rdb, calls, func(pipe redis.Pipeliner) {
		waits = append(waits, pipe.Do(ctx, "WAIT", 0, 1))
	})
	if n, err := replies[0].Int64(); err != nil || n != -1 {
		t.Fatalf("pttl reply = %d, %v; want -1", n, err)
	}
	res, err := replies[1].Slice()
	if err != nil {
		t.Fatalf("acquire reply: %v", err)
	}
	if g, err := node.ParseGrant(res); err != nil || !g.OK {
		t.Fatalf("acquire reply = %+v, %v; want a grant", g, err)
	}
	if !replies[0].Sent.Before(replies[1].Sent) {
		t.Errorf("sent %v and %v: the re-sent call must be dated from its own pipeline", replies[0].Sent, replies[1].Sent)
	}
	if len(waits) != 2 {
		t.Fatalf("then ran %d times, want once per pipeline (2)", len(waits))
	}
	for i, w := range waits {
		if err := w.Err(); err != nil {
			t.Errorf("WAIT of pipeline %d: %v", i+1, err)
		}
	}
	// One grant: the acquire ran once, in the second pipeline.
	if fence, err := rdb.Get(ctx, k.Fence).Int64(); err != nil || fence <= 0 {
		t.Fatalf("fence counter = %d, %v", fence, err)
	}
	if tok := rdb.HGet(ctx, k.Lock, "token").Val(); tok != "tok" {
		t.Fatalf("lock token = %q, want tok", tok)
	}
}

// TestPipelineNoResend: with every script loaded, one pipeline is sent.
func TestPipelineNoResend(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	k := node.KeysOf("test:", "pipe")
	if err := node.PTTL(k, "tok").Run(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	pipelines := 0
	replies := node.Pipeline(ctx, rdb, []node.Call{node.PTTL(k, "tok"), node.PTTL(k, "other")}, func(redis.Pipeliner) { pipelines++ })
	for i, r := range replies {
		if n, err := r.Int64(); err != nil || n != -1 {
			t.Fatalf("reply %d = %d, %v; want -1", i, n, err)
		}
	}
	if pipelines != 1 || !replies[0].Sent.Equal(replies[1].Sent) {
		t.Fatalf("%d pipelines, sent %v and %v; want one", pipelines, replies[0].Sent, replies[1].Sent)
	}
}
