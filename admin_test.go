package dlock_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

func TestListAndInspect(t *testing.T) {
	c, rdb, _ := setup(t, dlock.WithDefaultOwner("api-1"))
	for _, name := range []string{"order:1", "order:2", "job:nightly", "odd}name"} {
		mustAcquire(t, c, name, dlock.WithTTL(5*time.Second))
	}
	rdb.Set(bg, "dlock:{not-a-lock}", "x", 0) // another type under the prefix
	rdb.Set(bg, "unrelated", "x", 0)

	all, err := c.List(bg, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range all {
		names = append(names, i.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"job:nightly", "odd}name", "order:1", "order:2"}) {
		t.Fatalf("List = %v", names)
	}
	orders, err := c.List(bg, "order:*", 0)
	if err != nil || len(orders) != 2 {
		t.Fatalf("List(order:*) = %v, %v", orders, err)
	}
	if some, err := c.List(bg, "*", 1); err != nil || len(some) != 1 {
		t.Fatalf("List with limit 1 = %d locks, %v", len(some), err)
	}

	info, err := c.Inspect(bg, "order:1")
	if err != nil {
		t.Fatal(err)
	}
	if info.Owner != "api-1" || info.Lease != 5*time.Second || info.TTL <= 4*time.Second ||
		info.Fence <= 0 || len(info.TokenPrefix()) != 8 || info.Age(time.Now()) > time.Minute || info.Key != "dlock:{order:1}" {
		t.Fatalf("Inspect = %+v", info)
	}
	if _, err := c.Inspect(bg, "order:99"); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Inspect of a free lock: %v, want ErrNotHeld", err)
	}
	if _, err := c.Inspect(bg, "not-a-lock"); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("Inspect of a string key: %v, want ErrWrongType", err)
	}
}
