package dlockhttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockhttp"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/redlock"
)

// The default hold bound must not break a Locker that refuses
// dlock.WithMaxHold: a Redlock behind the middleware answered 500 to every
// request when the default came in. It is asked again without the bound.
func TestDefaultBoundSparesRedlock(t *testing.T) {
	srv := redistest.Start(t)
	r, err := redlock.New([]redis.UniversalClient{srv.Client(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(bg) })
	mw := dlockhttp.MustMiddleware(r, dlockhttp.MustParseTemplate("order:{path.id}"))
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := dlock.FromContext(r.Context()); !ok {
			t.Error("no lock in the handler's context")
		}
	})))
	ts := httptest.NewServer(mux)
	defer ts.Close()
	for i := range 3 {
		resp, err := http.Post(ts.URL+"/orders/7", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d through a Redlock: %d, want 200", i, resp.StatusCode)
		}
	}
}
