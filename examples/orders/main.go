// Command orders is a small order service that allows one order per user,
// however many instances of it run against one Redis. Its check ("has this
// user ordered?") and its write are two separate Redis commands, with work in
// between: without a lock, two requests for one user on two instances both
// pass the check and both write. dlockhttp's middleware serialises them on
// the lock "order-user:{userId}".
//
//	go run ./examples/orders -listen 127.0.0.1:8081 -redis 127.0.0.1:6379
//
// See README.md for running three instances and hammering them with curl.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockhttp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil && !errors.Is(err, flag.ErrHelp) {
		log.Fatal(err)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("orders", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve HTTP on")
	redisURL := fs.String("redis", orDefault(os.Getenv("DLOCK_URL"), "127.0.0.1:6379"), "Redis, as redis://host:port/db or host:port (default $DLOCK_URL, as the dlock CLI)")
	work := fs.Duration("work", 100*time.Millisecond, "time between the check and the write: the window the lock protects")
	unsafe := fs.Bool("unsafe", false, "serve without the lock, to watch duplicate orders happen")
	if err := fs.Parse(args); err != nil {
		return err
	}

	opts, err := redisOptions(*redisURL)
	if err != nil {
		return err
	}
	opts.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	locker, err := dlock.New(rdb, dlock.WithDefaultOwner("orders@"+*listen))
	if err != nil {
		return err
	}
	// Deferred after rdb.Close, so it runs first: locks are released while
	// the connection is still open.
	defer locker.Close(context.Background())

	srv := newServer(*listen, newHandler(locker, rdb, *listen, *work, *unsafe), *work)
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe() }()
	log.Printf("orders on http://%s, Redis %s, lock on: %t", *listen, opts.Addr, !*unsafe)
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// Let requests in flight finish (and release their locks) before exit.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}

// newServer sets every timeout a server facing the network needs. The lock
// middleware bounds how long a request holds its lock (dlockhttp's
// DefaultMaxHold, 30s); these bound the connection around it, and, being
// shorter, make that bound a backstop: a client that never finishes its
// headers (ReadHeaderTimeout) or its body (ReadTimeout: a slow-body client
// would otherwise hold the order's lock while it trickles), a handler that
// runs on (WriteTimeout, above the work time), an idle keep-alive
// connection (IdleTimeout).
func newServer(addr string, h http.Handler, work time.Duration) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      work + 10*time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

// redisOptions reads Redis as the dlock CLI reads $DLOCK_URL: a redis://
// or rediss:// URL, or plain host:port.
func redisOptions(v string) (*redis.Options, error) {
	if strings.Contains(v, "://") {
		return redis.ParseURL(v)
	}
	return &redis.Options{Addr: v}, nil
}

func orDefault(v, fallback string) string {
	if v == "" {
		return fallback
	}
	return v
}

// service is one instance's handlers. Orders live in Redis lists
// "orders:user:<id>", shared by every instance.
type service struct {
	rdb      redis.UniversalClient
	instance string
	work     time.Duration
}

// newHandler routes POST /orders/{userId} (place an order, under the lock
// unless unsafe) and GET /orders/{userId} (list them).
func newHandler(locker dlock.Locker, rdb redis.UniversalClient, instance string, work time.Duration, unsafe bool) http.Handler {
	s := &service{rdb: rdb, instance: instance, work: work}
	var place http.Handler = http.HandlerFunc(s.place)
	if !unsafe {
		// Default answer to a busy user: 409 with Retry-After. The lease
		// outlives the work many times over and is renewed anyway.
		byUser := dlockhttp.MustMiddleware(locker, dlockhttp.MustParseTemplate("order-user:{path.userId}"),
			dlockhttp.WithAcquireOptions(dlock.WithTTL(10*time.Second)))
		place = byUser(place)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{userId}", place)
	mux.HandleFunc("GET /orders/{userId}", s.list)
	return mux
}

// place checks, then writes: not atomic, on purpose. The lock is what makes
// it safe. r.Context() ends if the lock is lost, so a holder that is no
// longer exclusive does not write.
func (s *service) place(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key := "orders:user:" + r.PathValue("userId")
	n, err := s.rdb.LLen(ctx, key).Result()
	if err != nil {
		http.Error(w, "store unavailable", http.StatusServiceUnavailable)
		return
	}
	if n > 0 {
		http.Error(w, "this user already has an order", http.StatusConflict)
		return
	}
	select {
	case <-time.After(s.work): // payment, stock, ...: the race window
	case <-ctx.Done():
		http.Error(w, "stopped: "+context.Cause(ctx).Error(), http.StatusServiceUnavailable)
		return
	}
	var fence int64 // 0 when unsafe: no lock, no fence
	if lock, ok := dlock.FromContext(ctx); ok {
		fence = lock.Fence() // a real store would refuse a smaller fence than it has seen
	}
	order := fmt.Sprintf("order by %s via %s, fence %d, at %s", r.PathValue("userId"), s.instance, fence, time.Now().Format(time.RFC3339Nano))
	if err := s.rdb.RPush(ctx, key, order).Err(); err != nil {
		http.Error(w, "store unavailable", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintln(w, order)
}

func (s *service) list(w http.ResponseWriter, r *http.Request) {
	orders, err := s.rdb.LRange(r.Context(), "orders:user:"+r.PathValue("userId"), 0, -1).Result()
	if err != nil {
		http.Error(w, "store unavailable", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintf(w, "%d order(s)\n%s", len(orders), strings.Join(append(orders, ""), "\n"))
}
