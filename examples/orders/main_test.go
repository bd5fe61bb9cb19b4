package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockhttp"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// instance starts one instance of the service, with its own Redis
// connection and dlock client as a separate process would have, on a
// loopback port.
func instance(t *testing.T, redisAddr, name string) *httptest.Server {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	locker := dlock.MustNew(rdb, dlock.WithDefaultOwner(name))
	t.Cleanup(func() { _ = locker.Close(context.Background()) })
	srv := httptest.NewServer(newHandler(locker, rdb, name, 50*time.Millisecond, false))
	t.Cleanup(srv.Close)
	return srv
}

// Twenty orders for one user, fired at once across two instances: exactly
// one is placed, every other is refused 409 (busy, or already ordered), and
// Redis holds one order.
func TestOneOrderPerUserAcrossInstances(t *testing.T) {
	redisSrv := redistest.Start(t)
	instances := []*httptest.Server{instance(t, redisSrv.Addr, "a"), instance(t, redisSrv.Addr, "b")}

	const n = 20
	start := make(chan struct{})
	statuses := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		srv := instances[i%2]
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/orders/u1", nil)
			<-start // all requests leave together
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Error(err)
				statuses <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses <- resp.StatusCode
		})
	}
	close(start)
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	if count[http.StatusCreated] != 1 || count[http.StatusConflict] != n-1 {
		t.Fatalf("statuses %v, want exactly one 201 and %d 409", count, n-1)
	}
	orders, err := redisSrv.Client(t).LRange(context.Background(), "orders:user:u1", 0, -1).Result()
	if err != nil || len(orders) != 1 {
		t.Fatalf("Redis holds orders %q (%v), want exactly one", orders, err)
	}
	if !strings.Contains(orders[0], "fence ") || strings.Contains(orders[0], "fence 0,") {
		t.Errorf("order %q was not written under a lock's fence", orders[0])
	}

	// Listing works from either instance.
	resp, err := instances[1].Client().Get(instances[1].URL + "/orders/u1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), "1 order(s)") {
		t.Fatalf("GET: %d %q", resp.StatusCode, body)
	}
}

// The server the example runs sets the timeouts dlockhttp's Security section
// asks for, and they sit inside the middleware's hold bound.
func TestServerTimeouts(t *testing.T) {
	srv := newServer("127.0.0.1:0", http.NotFoundHandler(), 100*time.Millisecond)
	for name, d := range map[string]time.Duration{"ReadHeaderTimeout": srv.ReadHeaderTimeout, "ReadTimeout": srv.ReadTimeout,
		"WriteTimeout": srv.WriteTimeout, "IdleTimeout": srv.IdleTimeout} {
		if d <= 0 {
			t.Errorf("%s is not set", name)
		}
	}
	if srv.ReadTimeout >= dlockhttp.DefaultMaxHold || srv.WriteTimeout >= dlockhttp.DefaultMaxHold {
		t.Errorf("ReadTimeout %v, WriteTimeout %v: not inside the hold bound %v", srv.ReadTimeout, srv.WriteTimeout, dlockhttp.DefaultMaxHold)
	}
}
