package main

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockadmin"
	"github.com/dlock-go/dlock/internal/redistest"
)

// The CLI's JSON and the admin API's JSON are one shape: a script written
// against `dlock list -o json` reads GET /api/locks, and the reverse. The
// same locks (exclusive with a waiter, shared with readers and a waiting
// writer, a semaphore with its permits and a waiter) read both ways must
// give the same fields and, but for what the clock moves, the same values.
func TestCLIAndAdminJSONAgree(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	newClient := func(owner string) *dlock.Client {
		c := dlock.MustNew(srv.Client(t), dlock.WithDefaultOwner(owner))
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	take := func(c *dlock.Client, name string, opts ...dlock.AcquireOption) {
		if _, err := c.Acquire(ctx, name, append(opts, dlock.WithTTL(30*time.Second))...); err != nil {
			t.Fatalf("acquire %s: %v", name, err)
		}
	}
	waiting := make(chan struct{}, 8)
	wait := func(c *dlock.Client, name string, opts ...dlock.AcquireOption) {
		go func() {
			defer func() { waiting <- struct{}{} }()
			if l, err := c.Acquire(ctx, name, append(opts, dlock.WithWait(time.Minute))...); err == nil {
				_ = l.Release(context.Background())
			}
		}()
	}
	nwaiters := 0
	take(newClient("excl-holder"), "excl")
	wait(newClient("excl-waiter"), "excl")
	nwaiters++
	take(newClient("reader-1"), "shared", dlock.WithShared())
	take(newClient("reader-2"), "shared", dlock.WithShared())
	wait(newClient("shared-writer"), "shared")
	nwaiters++
	for _, o := range []string{"permit-1", "permit-2"} {
		take(newClient(o), "sem", dlock.WithPermits(2))
	}
	wait(newClient("sem-waiter"), "sem", dlock.WithPermits(2))
	nwaiters++
	t.Cleanup(func() {
		cancel()
		for range nwaiters {
			<-waiting
		}
	})
	c := newClient("admin")
	waitFor(t, "a waiter on each lock", func() bool {
		for _, n := range []string{"excl", "shared", "sem"} {
			if i, err := c.Inspect(ctx, n); err != nil || len(i.Queue) != 1 {
				return false
			}
		}
		return true
	})

	ts := httptest.NewServer(dlockadmin.MustNewHandler(c))
	defer ts.Close()
	get := func(path string) []byte {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return b
	}

	var apiList struct{ Locks []map[string]any }
	decode(t, get("/api/locks"), &apiList)
	var cliList []map[string]any
	r := dlockRun(t, srv, "list", "-o", "json")
	decode(t, []byte(r.stdout), &cliList)
	if len(cliList) != 3 || len(apiList.Locks) != 3 {
		t.Fatalf("CLI lists %d locks, the API %d; want 3 each", len(cliList), len(apiList.Locks))
	}
	for n := range cliList {
		same(t, "list: "+cliList[n]["name"].(string), cliList[n], apiList.Locks[n])
	}
	for _, name := range []string{"excl", "shared", "sem"} {
		var api, cli map[string]any
		decode(t, get("/api/locks/"+url.PathEscape(name)), &api)
		r := dlockRun(t, srv, "inspect", name, "-o", "json")
		decode(t, []byte(r.stdout), &cli)
		same(t, "inspect "+name, cli, api)
	}
	// The shapes hold what the test set up, so the comparison compared
	// something.
	var one lockView
	r = dlockRun(t, srv, "inspect", "sem", "-o", "json")
	decode(t, []byte(r.stdout), &one)
	if one.Kind != dlock.KindSemaphore || one.Permits != 2 || len(one.Holders) != 2 || len(one.Queue) != 1 || one.Queue[0].Owner != "sem-waiter" || one.Key == "" {
		t.Errorf("inspect sem -o json: %+v", one)
	}
	r = dlockRun(t, srv, "inspect", "shared", "-o", "json")
	decode(t, []byte(r.stdout), &one)
	if one.Kind != dlock.KindShared || len(one.Readers) != 2 || len(one.Queue) != 1 || one.Queue[0].Shared {
		t.Errorf("inspect shared -o json: %+v", one)
	}
}

func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
}

// moving are the fields the clock changes between two reads.
var moving = []string{"age_ms", "ttl_ms", "alive_ms"}

// same compares two JSON objects: the same keys everywhere, and the same
// values but for the moving ones.
func same(t *testing.T, what string, cli, api map[string]any) {
	t.Helper()
	if ck, ak := keys(cli), keys(api); !slices.Equal(ck, ak) {
		t.Errorf("%s: the CLI's fields %v, the API's %v", what, ck, ak)
		return
	}
	c, a := stripMoving(cli), stripMoving(api)
	if !reflect.DeepEqual(c, a) {
		cj, _ := json.MarshalIndent(c, "", " ")
		aj, _ := json.MarshalIndent(a, "", " ")
		t.Errorf("%s: the CLI says\n%s\nthe API says\n%s", what, cj, aj)
	}
}

// keys lists the field paths of v, nested objects and arrays included.
func keys(v any) []string {
	var out []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(x)) {
				out = append(out, prefix+k)
				walk(prefix+k+".", x[k])
			}
		case []any:
			for _, e := range x {
				walk(prefix+"[].", e)
			}
		}
	}
	walk("", v)
	return out
}

func stripMoving(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if !slices.Contains(moving, k) {
				out[k] = stripMoving(e)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = stripMoving(e)
		}
		return out
	}
	return v
}
