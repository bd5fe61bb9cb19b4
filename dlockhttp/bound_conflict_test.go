package dlockhttp_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockhttp"
)

// From the review of the hold bound: a min hold above the bound made the
// bounded acquisition invalid, which the fallback for Lockers that refuse
// hold limits took for such a Locker, and served every request unbounded
// from then on, also on a *dlock.Client. Now a bound the program set below
// its own min hold is refused when the middleware is made, and the default
// bound gives way to a longer min hold instead of vanishing.
func TestHoldBoundAndMinHold(t *testing.T) {
	c, rdb := setup(t)
	_, err := dlockhttp.Middleware(c, dlockhttp.PathValue("order:", "id"), dlockhttp.WithMaxHold(2*time.Second),
		dlockhttp.WithAcquireOptions(dlock.WithTTL(time.Minute), dlock.WithMinHold(5*time.Second)))
	if !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("WithMaxHold(2s) with a 5s min hold: %v, want ErrInvalidOption at construction", err)
	}

	pttl := make(chan time.Duration, 1)
	srv := serve(t, c, "POST /orders/{id}", dlockhttp.PathValue("order:", "id"),
		func(w http.ResponseWriter, r *http.Request) {
			pttl <- rdb.PTTL(r.Context(), "dlock:{order:mh}").Val()
		}, dlockhttp.WithAcquireOptions(dlock.WithTTL(2*time.Minute), dlock.WithMinHold(time.Minute)))
	if resp := send(srv, "POST", "/orders/mh", nil); resp.status != http.StatusOK {
		t.Fatalf("status %d", resp.status)
	}
	// Bounded at the min hold (1m), not at the default (30s, which the min
	// hold overrides) and not unbounded (the 2m TTL).
	if got := <-pttl; got <= dlockhttp.DefaultMaxHold || got > time.Minute {
		t.Errorf("lease %v with a 2m TTL and a 1m min hold: want the bound moved to the min hold", got)
	}
}
