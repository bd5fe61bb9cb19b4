package dlockhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockhttp"
)

// A request holds its lock no longer than the middleware's bound
// (DefaultMaxHold, 30s, unless WithMaxHold changes it): past it the lock
// frees for the next request and the handler's context ends, with a cause
// that says why.
func ExampleWithMaxHold() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	byOrder := dlockhttp.MustMiddleware(locker, dlockhttp.PathValue("order:", "id"),
		dlockhttp.WithMaxHold(200*time.Millisecond))
	slow := byOrder(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // a handler that would run on, as a slow client's upload
		cause := context.Cause(r.Context())
		fmt.Println("hold limit:", errors.Is(cause, dlock.ErrHoldLimit))
		http.Error(w, "took too long", http.StatusServiceUnavailable)
	}))
	req := httptest.NewRequest("POST", "/orders/77", nil)
	req.SetPathValue("id", "77")
	slow.ServeHTTP(httptest.NewRecorder(), req)

	// The lock is free again.
	lock, err := locker.TryAcquire(ctx, "order:77")
	fmt.Println("next holder:", err == nil)
	if err == nil {
		_ = lock.Release(ctx)
	}
	// Output:
	// hold limit: true
	// next holder: true
}

// A client that goes away while its request's lock is being acquired is
// answered 499 (StatusClientClosedRequest), not 503: access logs and
// metrics count it as cancelled, not as an outage of the lock service.
func ExampleStatusClientClosedRequest() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	byOrder := dlockhttp.MustMiddleware(locker, dlockhttp.PathValue("order:", "id"),
		dlockhttp.WithErrorWriter(func(w http.ResponseWriter, r *http.Request, status int, err error) {
			fmt.Println(status, "cancelled:", errors.Is(err, context.Canceled))
			w.WriteHeader(status)
		}))
	h := byOrder(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { fmt.Println("handler ran") }))

	gone, cancel := context.WithCancel(ctx)
	cancel() // the client left
	req := httptest.NewRequestWithContext(gone, "POST", "/orders/78", nil)
	req.SetPathValue("id", "78")
	h.ServeHTTP(httptest.NewRecorder(), req)
	// Output:
	// 499 cancelled: true
}

// Small bodies read before the lock is taken: a client that sends its body
// slowly holds no lock while it does, and one that leaves a waiting request
// is noticed at once. The handler reads the body as usual.
func ExampleWithBufferedBody() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	byOrder := dlockhttp.MustMiddleware(locker, dlockhttp.PathValue("order:", "id"),
		dlockhttp.WithBufferedBody(64<<10), dlockhttp.WithAcquireOptions(dlock.WithWait(2*time.Second)))
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}", byOrder(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "order %s: %s", r.PathValue("id"), body)
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, err := http.Post(srv.URL+"/orders/79", "application/json", strings.NewReader(`{"qty":2}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body))
	// Output:
	// 200 order 79: {"qty":2}
}
