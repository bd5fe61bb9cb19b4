package dlockhttp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
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
