package dlockhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockhttp"
	"github.com/dlock-go/dlock/dlocktest"
)

// patience bounds every wait in these tests: far above what loopback needs,
// so only a real hang fails them.
const patience = 10 * time.Second

type response struct {
	status int
	header http.Header
	body   string
	err    error
}

func send(srv *httptest.Server, method, path string, header map[string]string) response {
	ctx, cancel := context.WithTimeout(bg, patience)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, nil)
	if err != nil {
		return response{err: err}
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		return response{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: string(body), err: err}
}

func (r response) expect(t *testing.T, status int, bodyHas string) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("request failed: %v", r.err)
	}
	if r.status != status || !strings.Contains(r.body, bodyHas) {
		t.Fatalf("got %d %q, want %d with %q", r.status, r.body, status, bodyHas)
	}
}

func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(patience):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// serve mounts h, wrapped by the middleware, at pattern on a loopback server.
func serve(t *testing.T, c *dlock.Client, pattern string, name dlockhttp.NameFunc, h http.HandlerFunc, opts ...dlockhttp.Option) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(pattern, dlockhttp.MustMiddleware(c, name, opts...)(h))
	srv := httptest.NewServer(mux) // listens on 127.0.0.1
	t.Cleanup(srv.Close)
	return srv
}

// Two requests for one order at once: one runs, the other is answered 409
// with the holder's lease as Retry-After, and the handler never sees it.
func TestSameOrderConcurrentRequests(t *testing.T) {
	c, rdb := setup(t)
	const ttl = 10 * time.Second
	entered := make(chan struct{}, 2)
	finish := make(chan struct{})
	var running atomic.Int32
	srv := serve(t, c, "POST /orders/{orderId}", dlockhttp.MustParseTemplate("order:{path.orderId}"),
		func(w http.ResponseWriter, r *http.Request) {
			running.Add(1)
			entered <- struct{}{}
			select {
			case <-finish:
				fmt.Fprint(w, "paid")
			case <-r.Context().Done():
				http.Error(w, "cancelled", http.StatusInternalServerError)
			}
		},
		// A fixed lease, so the holder's remaining lease only goes down while
		// the test measures it; renewal would move it back up.
		dlockhttp.WithAcquireOptions(dlock.WithTTL(ttl), dlock.WithoutRenewal()))

	results := make(chan response, 2)
	for range 2 {
		go func() { results <- send(srv, "POST", "/orders/42", nil) }()
	}
	busy := await(t, results, "the refused request")
	// The busy answer left Redis after the script read the holder's PTTL,
	// so that PTTL lies between what is left now and the full lease.
	left, err := rdb.PTTL(bg, "dlock:{order:42}").Result()
	if err != nil {
		t.Fatal(err)
	}
	busy.expect(t, http.StatusConflict, "busy")
	ra, err := strconv.Atoi(busy.header.Get("Retry-After"))
	lo, hi := int(math.Ceil(left.Seconds())), int(ttl/time.Second)
	if err != nil || ra < lo || ra > hi {
		t.Fatalf("Retry-After %q, want whole seconds in [%d, %d] (lease left %v)", busy.header.Get("Retry-After"), lo, hi, left)
	}
	await(t, entered, "the handler of the winner")
	if n := running.Load(); n != 1 {
		t.Fatalf("%d handlers ran, want 1", n)
	}
	close(finish)
	await(t, results, "the winner's answer").expect(t, http.StatusOK, "paid")

	// Released: the next request for the order runs.
	go func() { results <- send(srv, "POST", "/orders/42", nil) }()
	await(t, entered, "the handler after release")
	await(t, results, "the answer after release").expect(t, http.StatusOK, "paid")
}

// Requests for different orders run side by side: each handler waits until
// both are inside, which only happens if neither lock excludes the other.
func TestDifferentOrdersRunInParallel(t *testing.T) {
	c, _ := setup(t)
	var mu sync.Mutex
	inside := 0
	both := make(chan struct{})
	srv := serve(t, c, "POST /orders/{orderId}", dlockhttp.PathValue("order:", "orderId"),
		func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			if inside++; inside == 2 {
				close(both)
			}
			mu.Unlock()
			select {
			case <-both:
				fmt.Fprint(w, "together")
			case <-time.After(patience):
				http.Error(w, "alone: the other order's handler never came in", http.StatusInternalServerError)
			}
		})
	results := make(chan response, 2)
	for _, id := range []string{"1", "2"} {
		go func() { results <- send(srv, "POST", "/orders/"+id, nil) }()
	}
	for range 2 {
		await(t, results, "an order's answer").expect(t, http.StatusOK, "together")
	}
}

// A handler whose lock is lost (the key deleted, or taken over by another
// token) sees its request context cancelled with a cause matching
// dlock.ErrLockLost, and the release-error handler is told of the loss.
func TestLostLockCancelsHandlerContext(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(rdb *redis.Client, key string) error
	}{
		{"deleted", func(rdb *redis.Client, key string) error { return rdb.Del(bg, key).Err() }},
		{"taken over", func(rdb *redis.Client, key string) error { return rdb.HSet(bg, key, "token", "someone-else").Err() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, rdb := setup(t)
			entered := make(chan struct{}, 1)
			releaseErr := make(chan error, 1)
			srv := serve(t, c, "POST /jobs/{id}", dlockhttp.PathValue("job:", "id"),
				func(w http.ResponseWriter, r *http.Request) {
					entered <- struct{}{}
					select {
					case <-r.Context().Done():
						if cause := context.Cause(r.Context()); errors.Is(cause, dlock.ErrLockLost) {
							http.Error(w, "stopped: "+cause.Error(), http.StatusConflict)
							return
						}
						http.Error(w, "cancelled for another reason", http.StatusInternalServerError)
					case <-time.After(patience):
						http.Error(w, "never cancelled", http.StatusInternalServerError)
					}
				},
				// A short lease: renewal every 100ms notices the loss quickly.
				dlockhttp.WithAcquireOptions(dlock.WithTTL(300*time.Millisecond)),
				dlockhttp.WithReleaseErrorHandler(func(_ *http.Request, err error) { releaseErr <- err }))

			results := make(chan response, 1)
			go func() { results <- send(srv, "POST", "/jobs/7", nil) }()
			await(t, entered, "the handler")
			if err := tc.lose(rdb, "dlock:{job:7}"); err != nil {
				t.Fatal(err)
			}
			await(t, results, "the handler's answer").expect(t, http.StatusConflict, "lock lost")
			if err := await(t, releaseErr, "the release error"); !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("release error %v, want dlock.ErrLockLost", err)
			}
		})
	}
}

// Requests that name no valid lock get 400, naming the missing field, and
// never reach the handler or Redis.
func TestInvalidNames(t *testing.T) {
	c, rdb := setup(t)
	for _, tc := range []struct {
		name    string
		pattern string
		path    string
		header  map[string]string
		fn      dlockhttp.NameFunc
		bodyHas string
	}{
		{"route without the wildcard", "POST /orders/", "/orders/", nil,
			dlockhttp.PathValue("order:", "orderId"), `missing path value "orderId"`},
		{"template path value", "POST /carts/", "/carts/", nil,
			dlockhttp.MustParseTemplate("cart:{path.cartId}"), `missing path value "cartId" (lock name field {path.cartId})`},
		{"missing header", "POST /users/{id}", "/users/1", nil,
			dlockhttp.MustParseTemplate("user:{path.id}:{header.X-Tenant}"), `missing header "X-Tenant"`},
		{"empty query parameter", "GET /reports", "/reports?day=", nil,
			dlockhttp.Query("report:", "day"), `missing query parameter "day"`},
		{"name too long", "POST /tenants", "/tenants", map[string]string{"X-Tenant": strings.Repeat("t", dlock.MaxNameLength)},
			dlockhttp.Header("tenant:", "X-Tenant"), "invalid lock"},
		{"NameFunc error", "POST /things", "/things", nil,
			func(*http.Request) (string, error) { return "", errors.New("secret detail") }, "names no lock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := serve(t, c, tc.pattern, tc.fn, func(w http.ResponseWriter, r *http.Request) {
				t.Error("the handler ran")
			})
			resp := send(srv, "POST", tc.path, tc.header)
			if strings.HasPrefix(tc.pattern, "GET") {
				resp = send(srv, "GET", tc.path, tc.header)
			}
			resp.expect(t, http.StatusBadRequest, tc.bodyHas)
			if strings.Contains(resp.body, "secret") {
				t.Errorf("the body leaks the NameFunc's error: %q", resp.body)
			}
		})
	}
	if keys, _ := rdb.Keys(bg, "*").Result(); len(keys) != 0 {
		t.Errorf("invalid requests wrote to Redis: %v", keys)
	}
}

// With Redis unreachable, or the dlock client closed, the answer is 503 and
// the handler does not run.
func TestRedisDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := l.Addr().String()
	l.Close() // nothing listens there now: every dial is refused
	rdb := redis.NewClient(&redis.Options{Addr: closedAddr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	down := dlock.MustNew(rdb)
	t.Cleanup(func() { _ = down.Close(bg) })

	closed, _ := setup(t)
	if err := closed.Close(bg); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		c      *dlock.Client
		opts   []dlockhttp.Option
		status int
	}{
		{"unreachable", down, nil, http.StatusServiceUnavailable},
		{"unreachable, custom status", down, []dlockhttp.Option{dlockhttp.WithUnavailableStatus(http.StatusBadGateway)}, http.StatusBadGateway},
		{"client closed", closed, nil, http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := serve(t, tc.c, "POST /orders/{id}", dlockhttp.PathValue("order:", "id"),
				func(w http.ResponseWriter, r *http.Request) { t.Error("the handler ran") }, tc.opts...)
			resp := send(srv, "POST", "/orders/1", nil)
			resp.expect(t, tc.status, "lock service unavailable")
			if strings.Contains(resp.body, closedAddr) {
				t.Errorf("the body leaks the Redis address: %q", resp.body)
			}
			if ra := resp.header.Get("Retry-After"); ra != "" {
				t.Errorf("Retry-After %q on an outage, want none", ra)
			}
		})
	}
}

// A panicking handler releases its lock, and the panic reaches the caller
// with its own value.
func TestPanicReleasesAndRepanics(t *testing.T) {
	c, _ := setup(t)
	boom := errors.New("boom")
	h := dlockhttp.MustMiddleware(c, dlockhttp.PathValue("order:", "id"))(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(boom) }))
	req := httptest.NewRequest("POST", "/orders/9", nil)
	req.SetPathValue("id", "9")

	func() {
		defer func() {
			if p := recover(); p != boom {
				t.Fatalf("recovered %v, want the handler's panic value", p)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), req)
		t.Fatal("no panic")
	}()
	l, err := c.TryAcquire(bg, "order:9")
	if err != nil {
		t.Fatalf("the lock was not released after the panic: %v", err)
	}
	_ = l.Release(bg)
}

// The handler reaches its lock; statuses and the error writer are options;
// a waiting middleware runs the second request after the first.
func TestOptionsAndFromContext(t *testing.T) {
	c, rdb := setup(t)

	t.Run("FromContext", func(t *testing.T) {
		srv := serve(t, c, "POST /orders/{id}", dlockhttp.PathValue("order:", "id"),
			func(w http.ResponseWriter, r *http.Request) {
				l, ok := dlock.FromContext(r.Context())
				if !ok {
					http.Error(w, "no lock", http.StatusInternalServerError)
					return
				}
				fmt.Fprintf(w, "%s fence>0:%t", l.Name(), l.Fence() > 0)
			})
		send(srv, "POST", "/orders/5", nil).expect(t, http.StatusOK, "order:5 fence>0:true")
		if _, ok := dlock.FromContext(bg); ok {
			t.Error("FromContext found a lock in a plain context")
		}
	})

	t.Run("busy status and error writer", func(t *testing.T) {
		// Renewed every second back to 3s, the holder's lease stays within
		// (2s, 3s]: Retry-After rounds it up to 3.
		held, err := c.TryAcquire(bg, "order:6", dlock.WithTTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release(bg)
		var gotErr error
		srv := serve(t, c, "POST /orders/{id}", dlockhttp.PathValue("order:", "id"),
			func(w http.ResponseWriter, r *http.Request) { t.Error("the handler ran") },
			dlockhttp.WithBusyStatus(http.StatusLocked),
			dlockhttp.WithErrorWriter(func(w http.ResponseWriter, r *http.Request, status int, err error) {
				gotErr = err
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				fmt.Fprintf(w, `{"error":"busy","retry_after":%q}`, w.Header().Get("Retry-After"))
			}))
		resp := send(srv, "POST", "/orders/6", nil)
		resp.expect(t, http.StatusLocked, `"retry_after":"3"`)
		var busy *dlock.NotObtainedError
		if !errors.As(gotErr, &busy) || busy.Name != "order:6" {
			t.Errorf("error writer got %v, want a *dlock.NotObtainedError for order:6", gotErr)
		}
	})

	t.Run("wait", func(t *testing.T) {
		held, err := c.TryAcquire(bg, "order:7")
		if err != nil {
			t.Fatal(err)
		}
		srv := serve(t, c, "POST /orders/{id}", dlockhttp.PathValue("order:", "id"),
			func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "served after waiting") },
			dlockhttp.WithAcquireOptions(dlock.WithWait(patience)))
		results := make(chan response, 1)
		go func() { results <- send(srv, "POST", "/orders/7", nil) }()
		// The request is waiting once its entry is in the lock's waiter queue.
		waiting := false
		for deadline := time.Now().Add(patience); !waiting && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			waiting = rdb.ZCard(bg, "dlock:{order:7}:q").Val() > 0
		}
		if !waiting {
			t.Fatal("the request never queued for the lock")
		}
		if err := held.Release(bg); err != nil {
			t.Fatal(err)
		}
		await(t, results, "the waiting request").expect(t, http.StatusOK, "served after waiting")
	})

	t.Run("misconfigured TTL", func(t *testing.T) {
		srv := serve(t, c, "POST /orders/{id}", dlockhttp.PathValue("order:", "id"),
			func(w http.ResponseWriter, r *http.Request) { t.Error("the handler ran") },
			dlockhttp.WithAcquireOptions(dlock.WithTTL(time.Nanosecond)))
		send(srv, "POST", "/orders/8", nil).expect(t, http.StatusInternalServerError, "internal error")
	})
}

func TestMiddlewareRefusesBadWiring(t *testing.T) {
	c, _ := setup(t)
	id := dlockhttp.PathValue("", "id")
	for _, tc := range []struct {
		name   string
		locker dlock.Locker
		names  dlockhttp.NameFunc
		opts   []dlockhttp.Option
	}{
		{"nil locker", nil, id, nil},
		{"nil NameFunc", c, nil, nil},
		{"status 0", c, id, []dlockhttp.Option{dlockhttp.WithBusyStatus(0)}},
		{"status 1000", c, id, []dlockhttp.Option{dlockhttp.WithUnavailableStatus(1000)}},
		{"nil error writer", c, id, []dlockhttp.Option{dlockhttp.WithErrorWriter(nil)}},
		{"negative max hold", c, id, []dlockhttp.Option{dlockhttp.WithMaxHold(-time.Second)}},
		{"negative body buffer", c, id, []dlockhttp.Option{dlockhttp.WithBufferedBody(-1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mw, err := dlockhttp.Middleware(tc.locker, tc.names, tc.opts...)
			if err == nil || mw != nil {
				t.Fatalf("Middleware: %v, %v; want an error and no middleware", mw != nil, err)
			}
			defer func() {
				if recover() == nil {
					t.Error("MustMiddleware did not panic")
				}
			}()
			dlockhttp.MustMiddleware(tc.locker, tc.names, tc.opts...)
		})
	}
}

// A handler that panics after its lock was lost still reaches the
// release-error handler (Run's own error goes with the panic; the lock's
// cause does not). The Locker is dlocktest's: the middleware takes any.
func TestPanicAfterLossReported(t *testing.T) {
	locker := dlocktest.MustNew()
	t.Cleanup(func() { _ = locker.Close(bg) })
	reported := make(chan error, 1)
	h := dlockhttp.MustMiddleware(locker, dlockhttp.PathValue("order:", "id"),
		dlockhttp.WithReleaseErrorHandler(func(_ *http.Request, err error) { reported <- err }))(
		http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			lock, _ := dlock.FromContext(r.Context())
			locker.Expire(lock.Name())
			<-r.Context().Done()
			panic("after the loss")
		}))
	req := httptest.NewRequest("POST", "/orders/3", nil)
	req.SetPathValue("id", "3")
	func() {
		defer func() { _ = recover() }()
		h.ServeHTTP(httptest.NewRecorder(), req)
	}()
	select {
	case err := <-reported:
		if !errors.Is(err, dlock.ErrLockLost) || !strings.Contains(err.Error(), "panicked") {
			t.Fatalf("reported %v, want a panic after a loss (ErrLockLost)", err)
		}
	default:
		t.Fatal("the release-error handler was not called")
	}
}

// Wiring the middleware with a nil *dlock.Client (a New that failed) or a
// negative wait fails at start-up, not on the first request.
func TestMiddlewareRefusesNilClientAndBadWait(t *testing.T) {
	var nilClient *dlock.Client
	if _, err := dlockhttp.Middleware(nilClient, dlockhttp.PathValue("", "id")); err == nil {
		t.Error("a nil *dlock.Client was accepted")
	}
	locker := dlocktest.MustNew()
	_, err := dlockhttp.Middleware(locker, dlockhttp.PathValue("", "id"), dlockhttp.WithAcquireOptions(dlock.WithWait(-time.Second)))
	if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "wait -1s is negative") {
		t.Errorf("a negative wait: %v, want ErrInvalidOption naming it", err)
	}
}

// The same lock applied twice to one request (two routers, or a middleware
// and a handler that both lock the order) is a wiring mistake: the inner
// acquisition fails at once with 500, instead of waiting for the request
// itself and answering 409 busy.
func TestNestedSameLockIsServerError(t *testing.T) {
	locker := dlocktest.MustNew()
	t.Cleanup(func() { _ = locker.Close(bg) })
	byOrder := dlockhttp.MustMiddleware(locker, dlockhttp.PathValue("order:", "id"),
		dlockhttp.WithAcquireOptions(dlock.WithWait(time.Hour)))
	h := byOrder(byOrder(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("the handler ran under a lock acquired twice")
	})))
	req := httptest.NewRequest("POST", "/orders/5", nil)
	req.SetPathValue("id", "5")
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() { h.ServeHTTP(rec, req); close(done) }()
	select {
	case <-done:
	case <-time.After(patience):
		t.Fatal("the nested acquisition waited for the request itself")
	}
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500", rec.Code)
	}
	if locker.Held("order:5") {
		t.Fatal("the outer lock was not released")
	}
}

// Route locks by the ServeMux pattern: while one request of the route
// runs, another of the same route, with other values, is refused as busy;
// a request no ServeMux routed names no lock.
func TestRouteLocksOneRequestOfARoute(t *testing.T) {
	c, _ := setup(t)
	entered := make(chan struct{}, 2)
	finish := make(chan struct{})
	srv := serve(t, c, "POST /reports/{id}/rebuild", dlockhttp.Route("route:"),
		func(w http.ResponseWriter, r *http.Request) {
			if l, ok := dlock.FromContext(r.Context()); !ok || l.Name() != "route:POST /reports/{id}/rebuild" {
				http.Error(w, fmt.Sprintf("lock %v", l), http.StatusInternalServerError)
				return
			}
			entered <- struct{}{}
			<-finish
			fmt.Fprint(w, "rebuilt")
		})
	results := make(chan response, 2)
	go func() { results <- send(srv, "POST", "/reports/1/rebuild", nil) }()
	await(t, entered, "the first rebuild")
	send(srv, "POST", "/reports/2/rebuild", nil).expect(t, http.StatusConflict, "busy")
	close(finish)
	await(t, results, "the first rebuild's answer").expect(t, http.StatusOK, "rebuilt")

	r := httptest.NewRequest("POST", "/reports/1/rebuild", nil) // not routed: no Pattern
	if _, err := dlockhttp.Route("route:")(r); !errors.Is(err, dlockhttp.ErrMissingValue) || !strings.Contains(err.Error(), "route pattern") {
		t.Fatalf("Route of an unrouted request: %v, want a MissingValueError naming the route pattern", err)
	}
}
