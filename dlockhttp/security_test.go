package dlockhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockhttp"
)

// slowBody opens a raw connection to srv and sends a POST to path whose
// declared body arrives one byte per interval, until stop is closed: the
// slow-body client of issue 18. It returns when the connection is closed.
func slowBody(t *testing.T, srv *httptest.Server, path string, interval time.Duration, stop <-chan struct{}) {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	const size = 1000
	if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", path, size); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer conn.Close()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for range size {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte("x")); err != nil {
					return
				}
			}
		}
	}()
}

// A client that trickles its body holds the lock no longer than the
// middleware's hold bound: a legitimate request for the same order gets
// through once the bound has passed, although the slow client still sends.
// Before the bound, renewal kept the lock for as long as the client sent.
func TestSlowBodyCannotHoldPastBound(t *testing.T) {
	c, _ := setup(t)
	const bound = time.Second
	var entered atomic.Int32
	handlerCause := make(chan error, 2)
	srv := serve(t, c, "POST /orders/{id}", dlockhttp.PathValue("order:", "id"),
		func(w http.ResponseWriter, r *http.Request) {
			if entered.Add(1) > 1 {
				fmt.Fprint(w, "served")
				return
			}
			_, err := io.ReadAll(r.Body) // the slow client's body: it never ends in time
			handlerCause <- context.Cause(r.Context())
			http.Error(w, fmt.Sprint(err), http.StatusRequestTimeout)
		},
		dlockhttp.WithAcquireOptions(dlock.WithTTL(300*time.Millisecond)), dlockhttp.WithMaxHold(bound))

	stop := make(chan struct{})
	stopOnce := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
	}
	defer stopOnce()
	slowBody(t, srv, "/orders/1", 100*time.Millisecond, stop)
	for deadline := time.Now().Add(patience); entered.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the slow request never reached the handler")
		}
	}
	start := time.Now()
	// Busy while within the bound.
	send(srv, "POST", "/orders/1", nil).expect(t, http.StatusConflict, "busy")
	var got response
	for time.Since(start) < 3*bound {
		if got = send(srv, "POST", "/orders/1", nil); got.status == http.StatusOK {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	got.expect(t, http.StatusOK, "served")
	if took := time.Since(start); took > bound+500*time.Millisecond {
		t.Fatalf("the lock freed %v after the slow request took it, want about the bound %v", took, bound)
	}
	// The slow handler learns why once its body read returns.
	stopOnce()
	if cause := await(t, handlerCause, "the slow handler"); !errors.Is(cause, dlock.ErrHoldLimit) || !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("the slow handler's context ended with %v, want the hold limit", cause)
	}
}

// Without any option the middleware bounds the hold by DefaultMaxHold: the
// lock's context carries the hold limit, and a user's own dlock.WithMaxHold
// replaces it (WithMaxHold(0) removes it).
func TestDefaultMaxHold(t *testing.T) {
	c, rdb := setup(t)
	pttl := make(chan time.Duration, 1)
	for _, tc := range []struct {
		name string
		opts []dlockhttp.Option
		max  time.Duration // the largest TTL a lease may reach
	}{
		{"default", nil, dlockhttp.DefaultMaxHold},
		{"user's bound wins", []dlockhttp.Option{dlockhttp.WithAcquireOptions(dlock.WithTTL(time.Minute), dlock.WithMaxHold(2 * time.Second))}, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ttl := time.Minute
			srv := serve(t, c, "POST /orders/{id}", dlockhttp.PathValue("order:", "id"),
				func(w http.ResponseWriter, r *http.Request) {
					pttl <- rdb.PTTL(r.Context(), "dlock:{order:dm}").Val()
				}, append([]dlockhttp.Option{dlockhttp.WithAcquireOptions(dlock.WithTTL(ttl))}, tc.opts...)...)
			send(srv, "POST", "/orders/dm", nil).expect(t, http.StatusOK, "")
			if got := <-pttl; got <= 0 || got > tc.max {
				t.Fatalf("lease %v with a TTL of %v, want at most the hold bound %v", got, ttl, tc.max)
			}
		})
	}
	t.Run("WithMaxHold(0) removes it", func(t *testing.T) {
		srv := serve(t, c, "POST /orders/{id}", dlockhttp.PathValue("order:", "id"),
			func(w http.ResponseWriter, r *http.Request) {
				pttl <- rdb.PTTL(r.Context(), "dlock:{order:dm0}").Val()
			}, dlockhttp.WithAcquireOptions(dlock.WithTTL(time.Minute), dlock.WithMaxHold(0)))
		send(srv, "POST", "/orders/dm0", nil).expect(t, http.StatusOK, "")
		if got := <-pttl; got <= dlockhttp.DefaultMaxHold {
			t.Fatalf("lease %v, want the minute asked for", got)
		}
	})
}

var _ = strings.Contains
