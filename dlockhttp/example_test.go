package dlockhttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockhttp"
)

// One payment per order at a time, across every instance of the service: a
// request for an order that another request is paying is answered 409 with
// Retry-After, and runs once the lock is free.
func ExampleMiddleware() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	byOrder := dlockhttp.MustMiddleware(locker, dlockhttp.MustParseTemplate("order:{path.orderId}"),
		dlockhttp.WithAcquireOptions(dlock.WithTTL(30*time.Second)))
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{orderId}/pay", byOrder(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// r.Context() ends if the lock is lost: pass it to every write.
		lock, _ := dlock.FromContext(r.Context())
		fmt.Fprintf(w, "paid under %s", lock.Name())
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	post := func() {
		resp, err := http.Post(srv.URL+"/orders/42/pay", "", nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusConflict {
			secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			fmt.Println(resp.StatusCode, "retry within the holder's lease:", secs >= 1 && secs <= 30)
			return
		}
		fmt.Println(resp.StatusCode, string(body))
	}

	// Another instance is paying order 42 right now.
	other, err := locker.TryAcquire(ctx, "order:42", dlock.WithTTL(30*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	post()
	_ = other.Release(ctx)
	post()
	// Output:
	// 409 retry within the holder's lease: true
	// 200 paid under order:42
}

// A lock name template from configuration is checked once, at start-up,
// with an error that points at the bad field; a request that lacks a value
// is refused with the field named.
func ExampleParseTemplate() {
	_, err := dlockhttp.ParseTemplate("order:{path.orderId}:{heder.X-User-Id}")
	fmt.Println(err)

	name, _ := dlockhttp.ParseTemplate("order:{path.orderId}:{header.X-User-Id}")
	r := httptest.NewRequest("POST", "/orders/42", nil)
	r.SetPathValue("orderId", "42") // what ServeMux does for "POST /orders/{orderId}"
	_, err = name(r)
	fmt.Println(err)

	r.Header.Set("X-User-Id", "u7")
	fmt.Println(name(r))
	// Output:
	// dlockhttp: lock name template "order:{path.orderId}:{heder.X-User-Id}": at offset 21: field "{heder.X-User-Id}": unknown source "heder": want path, header or query
	// dlockhttp: missing header "X-User-Id" (lock name field {header.X-User-Id})
	// order:42:u7 <nil>
}

// Route names the lock after the ServeMux pattern the request matched: one
// rebuild at a time, whichever report.
func ExampleRoute() {
	name := dlockhttp.Route("route:")
	r := httptest.NewRequest("POST", "/reports/7/rebuild", nil)
	_, err := name(r)
	fmt.Println(err)

	r.Pattern = "POST /reports/{id}/rebuild" // what ServeMux sets when it routes r
	fmt.Println(name(r))
	// Output:
	// dlockhttp: missing route pattern: the lock is named after the ServeMux pattern that matched the request (Route), and no ServeMux routed it
	// route:POST /reports/{id}/rebuild <nil>
}
