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

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockhttp"
	"github.com/dlock-go/dlock/internal/redistest"
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
		{"user's bound wins", []dlockhttp.Option{dlockhttp.WithAcquireOptions(dlock.WithTTL(time.Minute), dlock.WithMaxHold(2*time.Second))}, 2 * time.Second},
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

// stallHook holds every script call (the acquire) until its context ends,
// while on: a Redis round trip the client can walk away from.
type stallHook struct {
	on      *atomic.Bool
	entered chan<- struct{}
}

func (stallHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h stallHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); h.on.Load() && (n == "evalsha" || n == "eval") {
			select {
			case h.entered <- struct{}{}:
			default:
			}
			<-ctx.Done()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		return next(ctx, cmd)
	}
}
func (stallHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// statusRecorder is an access log's view of a response: the status the
// server wrote, also for a client that has gone.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// A client that gives up while its lock is being acquired is not an outage:
// the middleware answers 499 (cancelled) and tells the error writer why,
// never 503 "lock service unavailable", which inflates the 5xx rate that
// alerts and load balancers read. Both while Redis answers (a stalled round
// trip) and while waiting for a busy lock (WithWait).
func TestClientCancelIsNot5xx(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stall bool
	}{{"during the round trip", true}, {"while waiting", false}} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := redistest.Start(t).Client(t)
			var on atomic.Bool
			entered := make(chan struct{}, 1)
			rdb.AddHook(stallHook{on: &on, entered: entered})
			c := dlock.MustNew(rdb)
			t.Cleanup(func() { _ = c.Close(bg) })
			if !tc.stall {
				held, err := c.TryAcquire(bg, "order:c")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = held.Release(bg) })
			}
			on.Store(tc.stall)

			written := make(chan int, 1)
			writerErr := make(chan error, 1)
			mw := dlockhttp.MustMiddleware(c, dlockhttp.PathValue("order:", "id"),
				dlockhttp.WithAcquireOptions(dlock.WithWait(patience)),
				dlockhttp.WithErrorWriter(func(w http.ResponseWriter, r *http.Request, status int, err error) {
					writerErr <- err
					w.WriteHeader(status)
				}))
			mux := http.NewServeMux()
			mux.Handle("GET /orders/{id}", mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
				t.Error("the handler ran")
			})))
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rec := &statusRecorder{ResponseWriter: w}
				mux.ServeHTTP(rec, r)
				written <- rec.status
			}))
			t.Cleanup(srv.Close)

			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/orders/c", nil)
			done := make(chan error, 1)
			go func() {
				resp, err := srv.Client().Do(req)
				if err == nil {
					resp.Body.Close()
				}
				done <- err
			}()
			if tc.stall {
				await(t, entered, "the acquire's round trip")
			} else {
				for deadline := time.Now().Add(patience); rdb.ZCard(bg, "dlock:{order:c}:q").Val() == 0; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("the request never queued for the lock")
					}
				}
			}
			start := time.Now()
			cancel()
			await(t, done, "the client")
			on.Store(false) // the give-back after the cut round trip may go through
			status := await(t, written, "the server's answer")
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("the server noticed the client leave after %v", took)
			}
			if status >= 500 || status != 499 {
				t.Fatalf("the server wrote %d for a client that went away, want %d", status, 499)
			}
			if err := await(t, writerErr, "the error writer"); !errors.Is(err, context.Canceled) {
				t.Fatalf("error writer got %v, want context.Canceled", err)
			}
		})
	}
}

// What the package documentation says of a request with a body: net/http
// watches the connection only once the body has been read to its end, so a
// client that leaves while its unread POST waits for a lock is noticed when
// the wait ends (WithWait's d), not before; a request without a body is
// noticed at once (TestClientCancelIsNot5xx). Either way the answer is not
// a 5xx.
func TestUnreadBodyWaitEndsAtWaitLimit(t *testing.T) {
	c, rdb := setup(t)
	held, err := c.TryAcquire(bg, "order:b")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(bg)
	const wait = 1500 * time.Millisecond
	written := make(chan int, 1)
	mw := dlockhttp.MustMiddleware(c, dlockhttp.PathValue("order:", "id"), dlockhttp.WithAcquireOptions(dlock.WithWait(wait)))
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}", mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("the handler ran") })))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		mux.ServeHTTP(rec, r)
		written <- rec.status
	}))
	t.Cleanup(srv.Close)

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprint(conn, "POST /orders/b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(patience); rdb.ZCard(bg, "dlock:{order:b}:q").Val() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the request never queued for the lock")
		}
	}
	start := time.Now()
	conn.Close()
	status := await(t, written, "the server's answer")
	took := time.Since(start)
	if status >= 500 {
		t.Fatalf("the server wrote %d for a client that went away", status)
	}
	if took > wait+time.Second {
		t.Fatalf("the wait ran %v after the client left, past its limit %v", took, wait)
	}
	t.Logf("answered %d, %v after the client left (wait limit %v)", status, took, wait)
}

// With WithBufferedBody, a request body of a declared size within the bound
// is read before the lock is taken: a client that trickles it holds no
// lock meanwhile (a legitimate request for the same order runs at once),
// and a client that leaves while its POST waits for a busy lock is noticed
// at once, net/http watching the connection once the body is read.
func TestBufferedBody(t *testing.T) {
	t.Run("slow body holds no lock", func(t *testing.T) {
		c, _ := setup(t)
		var entered atomic.Int32
		srv := serve(t, c, "POST /orders/{id}", dlockhttp.PathValue("order:", "id"),
			func(w http.ResponseWriter, r *http.Request) {
				entered.Add(1)
				b, _ := io.ReadAll(r.Body)
				fmt.Fprintf(w, "served %d bytes", len(b))
			}, dlockhttp.WithBufferedBody(4<<10))
		stop := make(chan struct{})
		defer close(stop)
		slowBody(t, srv, "/orders/1", 20*time.Millisecond, stop)
		time.Sleep(300 * time.Millisecond) // the slow client is well into its body
		send(srv, "POST", "/orders/1", nil).expect(t, http.StatusOK, "served 0 bytes")
		if n := entered.Load(); n != 1 {
			t.Fatalf("%d handlers ran, want only the legitimate request's", n)
		}
	})
	t.Run("a body above the bound is left to the handler", func(t *testing.T) {
		c, _ := setup(t)
		srv := serve(t, c, "POST /orders/{id}", dlockhttp.PathValue("order:", "id"),
			func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				fmt.Fprintf(w, "read %d bytes", len(b))
			}, dlockhttp.WithBufferedBody(4))
		ctx, cancel := context.WithTimeout(bg, patience)
		defer cancel()
		for _, body := range []string{"abc", "abcdefgh"} {
			req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/orders/2", strings.NewReader(body))
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := fmt.Sprintf("read %d bytes", len(body)); string(b) != want {
				t.Fatalf("body %q: the handler said %q, want %q", body, b, want)
			}
		}
	})
	t.Run("client leaving a waiting POST is noticed", func(t *testing.T) {
		c, rdb := setup(t)
		held, err := c.TryAcquire(bg, "order:b")
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release(bg)
		written := make(chan int, 1)
		mw := dlockhttp.MustMiddleware(c, dlockhttp.PathValue("order:", "id"),
			dlockhttp.WithAcquireOptions(dlock.WithWait(patience)), dlockhttp.WithBufferedBody(1<<10))
		mux := http.NewServeMux()
		mux.Handle("POST /orders/{id}", mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("the handler ran") })))
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := &statusRecorder{ResponseWriter: w}
			mux.ServeHTTP(rec, r)
			written <- rec.status
		}))
		t.Cleanup(srv.Close)
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Fprint(conn, "POST /orders/b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(patience); rdb.ZCard(bg, "dlock:{order:b}:q").Val() == 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the request never queued for the lock")
			}
		}
		start := time.Now()
		conn.Close()
		status := await(t, written, "the server's answer")
		if took := time.Since(start); took > 2*time.Second || status != dlockhttp.StatusClientClosedRequest {
			t.Fatalf("answered %d %v after the client left, want 499 at once", status, took)
		}
	})
}
