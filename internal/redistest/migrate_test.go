package redistest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

func TestMigrateSlot(t *testing.T) {
	ctx := context.Background()
	cs := redistest.StartCluster(t, redistest.WithReplicas(0))
	cc := cs.ClusterClient(t)
	const key = "{mig}:a"
	for _, k := range []string{key, "{mig}:b", "{mig}:c"} {
		if err := cc.Set(ctx, k, "v", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	slot, err := cs.KeySlot(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	from, err := cs.SlotOwner(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	var to string
	for _, p := range cs.Addrs {
		if p != from {
			to = p
			break
		}
	}
	sawAsk := false
	n, err := cs.MigrateSlot(ctx, slot, to, func() {
		// Open: the source still has the keys and serves them.
		if v, err := cs.Node(from).Client(t).Get(ctx, key).Result(); err != nil || v != "v" {
			t.Errorf("source during the open migration: %q, %v", v, err)
		}
		err := cs.Node(from).Client(t).Get(ctx, "{mig}:none").Err()
		sawAsk = err != nil && strings.HasPrefix(err.Error(), "ASK ")
	})
	if err != nil || n != 3 {
		t.Fatalf("MigrateSlot: %d keys, %v; want 3", n, err)
	}
	if !sawAsk {
		t.Error("the source did not answer ASK for a missing key while migrating")
	}
	if owner, err := cs.SlotOwner(ctx, slot); err != nil || owner != to {
		t.Fatalf("slot %d on %s (%v) after the migration, want %s", slot, owner, err, to)
	}
	if v, err := cs.Node(to).Client(t).Get(ctx, key).Result(); err != nil || v != "v" {
		t.Fatalf("target after the migration: %q, %v", v, err)
	}
	if ttl := cs.Node(to).Client(t).PTTL(ctx, key).Val(); ttl <= 0 {
		t.Fatalf("TTL lost on the way: %v", ttl)
	}
	if v, err := cc.Get(ctx, key).Result(); err != nil || v != "v" {
		t.Fatalf("cluster client after the migration: %q, %v", v, err)
	}
	if n, err := cs.MigrateSlot(ctx, slot, from, nil); err != nil || n != 3 {
		t.Fatalf("back: %d keys, %v", n, err)
	}
	if v, err := cc.Get(ctx, key).Result(); err != nil || v != "v" {
		t.Fatalf("cluster client after the way back: %q, %v", v, err)
	}
}
