// Command dbtx shows why a lock must be taken before a database transaction
// begins and released only after it commits. Workers, each with a dlock
// Client of its own as separate instances of a service have, take units of
// stock from one row (read the quantity, write it less one) under the lock
// "stock:{id}", first in the wrong order (begin, lock, read, write, release,
// commit) and then in the right one (lock, begin, read, write, commit,
// release), and print how many updates each order lost.
//
// SQLite (pure Go, a file in a temporary directory) is the default; a
// PostgreSQL DSN (-postgres, or DBTX_POSTGRES) runs it on PostgreSQL:
//
//	go run . -redis 127.0.0.1:6379
//	go run . -redis 127.0.0.1:6379 -postgres 'postgres://user@127.0.0.1:5432/db?sslmode=disable'
//
// See README.md and the repository's docs/transactions.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil && !errors.Is(err, flag.ErrHelp) {
		log.Fatal(err)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("dbtx", flag.ContinueOnError)
	redisAddr := fs.String("redis", orDefault(os.Getenv("DLOCK_URL"), "127.0.0.1:6379"), "Redis, as redis://host:port/db or host:port (default $DLOCK_URL, as the dlock CLI and the other examples)")
	pgDSN := fs.String("postgres", os.Getenv("DBTX_POSTGRES"), "PostgreSQL DSN; empty: SQLite in a temporary directory (default from DBTX_POSTGRES)")
	workers := fs.Int("workers", 8, "workers, each with its own dlock Client")
	ops := fs.Int("ops", 25, "units of stock each worker takes")
	work := fs.Duration("work", 2*time.Millisecond, "work between the read and the write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *workers < 1 || *workers > 100 {
		return fmt.Errorf("dbtx: -workers %d: must be in 1..100", *workers)
	}
	if *ops < 1 || *ops > 10000 {
		return fmt.Errorf("dbtx: -ops %d: must be in 1..10000", *ops)
	}

	ropts, err := redisOptions(*redisAddr)
	if err != nil {
		return fmt.Errorf("dbtx: -redis %q: %w", *redisAddr, err)
	}
	// One look before the workers start: a Redis that is down or a wrong
	// port is one clear line, not every worker's dials retried for seconds.
	if err := ping(ctx, ropts); err != nil {
		return fmt.Errorf("dbtx: Redis at %s: %w (give its address with -redis or $DLOCK_URL)", ropts.Addr, err)
	}

	store, where, err := openStore(*pgDSN)
	if err != nil {
		return err
	}
	defer store.Close()

	lockers, closeAll, err := newLockers(ropts, *workers)
	if err != nil {
		return err
	}
	defer closeAll()

	fmt.Fprintf(out, "%s; Redis %s; %d workers, each its own dlock Client, %d takes each, %v of work per take\n",
		where, ropts.Addr, *workers, *ops, *work)
	var figs []Figures
	for _, o := range []struct {
		name string
		take Take
	}{{"wrong", TakeWrong}, {"right", TakeRight}} {
		f, err := Trial{Name: o.name, Take: o.take, Store: store, Lockers: lockers, Row: "sku-1",
			Start: int64(*workers * *ops), Ops: *ops, Work: *work}.Run(ctx)
		if err != nil {
			return err
		}
		figs = append(figs, f)
	}
	printFigures(out, figs...)

	// A holder paused past its lease, in the right order: the fence column
	// refuses a write made after the next holder's; the lock's context
	// rolls back a write made before the lease ended, committed after.
	if err := store.Reset(ctx, "sku-2", 10); err != nil {
		return err
	}
	st, err := StaleWrite(ctx, lockers[0], lockers[len(lockers)-1], store, "sku-2")
	if err != nil {
		return err
	}
	what := "refused by the fence column"
	if !errors.Is(st.WriteErr, ErrStale) {
		what = fmt.Sprintf("NOT refused (%v, commit: %v)", st.WriteErr, st.CommitErr)
	}
	fmt.Fprintf(out, "paused past its %v lease, then wrote: %s (fence %d, the row's %d); qty %d\n",
		pausedTTL, what, st.StaleFence, st.RowFence, st.Qty)
	if err := store.Reset(ctx, "sku-3", 10); err != nil {
		return err
	}
	if st, err = LostLockMidTx(ctx, lockers[0], store, "sku-3"); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote, then paused past its %v lease: commit: %v (%v); qty %d\n",
		pausedTTL, orOK(st.CommitErr), st.Cause, st.Qty)
	return nil
}

// openStore opens PostgreSQL when dsn is set, else SQLite in a new temporary
// directory (removed by Close). where says which, for the figures.
func openStore(dsn string) (s *Store, where string, err error) {
	if dsn != "" {
		s, err = OpenPostgres(dsn)
		return s, "PostgreSQL (READ COMMITTED)", err
	}
	dir, err := os.MkdirTemp("", "dbtx-")
	if err != nil {
		return nil, "", err
	}
	path := filepath.Join(dir, "stock.db")
	s, err = OpenSQLite(path)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, "", err
	}
	s.cleanup = func() { _ = os.RemoveAll(dir) }
	return s, "SQLite (WAL, busy timeout 10s) " + path, nil
}

// newLockers makes n dlock Clients, each on its own Redis connection pool,
// as n instances of a service would have.
func newLockers(ropts *redis.Options, n int) ([]dlock.Locker, func(), error) {
	var lockers []dlock.Locker
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	for i := range n {
		o := *ropts
		o.ContextTimeoutEnabled = true
		rdb := redis.NewClient(&o)
		closers = append(closers, func() { _ = rdb.Close() })
		c, err := dlock.New(rdb, dlock.WithDefaultOwner(fmt.Sprintf("dbtx-worker-%d", i)))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		// Appended after the Redis client's close, so run before it.
		closers = append(closers, func() { _ = c.Close(context.Background()) })
		lockers = append(lockers, c)
	}
	return lockers, closeAll, nil
}

func orOK(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

func orDefault(v, fallback string) string {
	if v == "" {
		return fallback
	}
	return v
}

// redisOptions reads Redis as the dlock CLI reads $DLOCK_URL: a redis://
// or rediss:// URL, or plain host:port.
func redisOptions(v string) (*redis.Options, error) {
	if strings.Contains(v, "://") {
		return redis.ParseURL(v)
	}
	return &redis.Options{Addr: v}, nil
}

// ping asks Redis once, within 2s and without go-redis' retries.
func ping(ctx context.Context, ropts *redis.Options) error {
	o := *ropts
	o.MaxRetries, o.DialTimeout = -1, 2*time.Second
	rdb := redis.NewClient(&o)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return rdb.Ping(ctx).Err()
}
