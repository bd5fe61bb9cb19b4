package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"modernc.org/sqlite"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// exampleAddr is the redis-server of the Example functions, started by
// TestMain.
var exampleAddr string

// TestMain starts the examples' redis-server and fails the run when a
// goroutine outlives the tests (renewal loops, pub/sub readers, the
// connection pools' openers).
func TestMain(m *testing.M) { os.Exit(redistest.RunMain(m, &exampleAddr)) }

// backends runs fn once per database: SQLite always, PostgreSQL when its
// binaries are on PATH (else that subtest is skipped, with the reason).
func backends(t *testing.T, fn func(t *testing.T, s *Store)) {
	t.Run("sqlite", func(t *testing.T) {
		s, err := OpenSQLite(filepath.Join(t.TempDir(), "stock.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		checkPragmas(t, s)
		fn(t, s)
	})
	t.Run("postgres", func(t *testing.T) {
		s, err := OpenPostgres(startPostgres(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		fn(t, s)
	})
}

// checkPragmas checks that the DSN's pragmas (WAL, the busy timeout) reach
// every connection of the pool, not only the one that created the file: two
// connections held at once are two.
func checkPragmas(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	for range 2 {
		c, err := s.DB().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var mode string
		var timeout int
		if err := c.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&timeout); err != nil {
			t.Fatal(err)
		}
		if mode != "wal" || timeout != 10000 {
			t.Fatalf("SQLite connection: journal_mode %q, busy_timeout %d; want wal and 10000", mode, timeout)
		}
	}
}

// lockers makes n dlock Clients on one Redis, each with its own connection
// pool, as n instances of a service have.
func lockers(t *testing.T, addr string, n int) []dlock.Locker {
	t.Helper()
	ls, closeAll, err := newLockers(&redis.Options{Addr: addr}, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeAll)
	return ls
}

// The right order loses nothing under concurrency: every take commits, the
// fence column refuses none, and the row shows each of them. The wrong
// order, same workers, same work, same fenced UPDATE, loses updates: at
// least one in at most five runs (it lost some in every run here). Its fence
// checks pass: the fence cannot catch the wrong order, whose next holder has
// the larger fence.
func TestOrders(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		r := redistest.Start(t)
		ls := lockers(t, r.Addr, 6)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		trial := func(name string, take Take) Figures {
			t.Helper()
			f, err := Trial{Name: name, Take: take, Store: s, Lockers: ls, Row: "sku-" + name,
				Start: 1000, Ops: 10, Work: 2 * time.Millisecond}.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}

		right := trial("right", TakeRight)
		t.Logf("%s right order: %d committed, %d refused, %d failed, expected %d, actual %d, lost %d (%v)",
			s.Kind(), right.Committed, right.Refused, right.Failed, right.Expected, right.Actual, right.Lost(), right.Took)
		if right.Committed != 60 || right.Refused != 0 || right.Failed != 0 || right.Lost() != 0 || right.Actual != 940 {
			t.Errorf("right order: %d committed, %d refused, %d failed (first: %v), row %d, lost %d; want 60 committed, "+
				"none refused or failed, row 940, none lost", right.Committed, right.Refused, right.Failed, right.Err, right.Actual, right.Lost())
		}

		lostSome := false
		for run := 1; run <= 5 && !lostSome; run++ {
			wrong := trial("wrong", TakeWrong)
			t.Logf("%s wrong order, run %d: %d committed, %d refused, %d failed, expected %d, actual %d, lost %d (%v)",
				s.Kind(), run, wrong.Committed, wrong.Refused, wrong.Failed, wrong.Expected, wrong.Actual, wrong.Lost(), wrong.Took)
			if wrong.Failed != 0 || wrong.Refused != 0 {
				t.Errorf("wrong order: %d failed (first: %v), %d refused: its loss must come from stale reads, not from errors",
					wrong.Failed, wrong.Err, wrong.Refused)
			}
			lostSome = wrong.Lost() > 0
		}
		if !lostSome {
			t.Errorf("wrong order lost no update in 5 runs: the test no longer shows the bug it documents")
		}
	})
}

// A holder paused past its lease (renewal off, a short TTL) has read but
// not written; the next holder takes the lock, writes and commits. When the
// paused holder wakes up and writes, on a context the lock does not cancel,
// so that only the fence can stop it, the fence column refuses its UPDATE:
// it rolls back, and the row keeps the next holder's write.
func TestFenceRefusesStaleHolder(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		r := redistest.Start(t)
		ls := lockers(t, r.Addr, 2)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		const row = "sku-fence"
		if err := s.Reset(ctx, row, 10); err != nil {
			t.Fatal(err)
		}
		st, err := StaleWrite(ctx, ls[0], ls[1], s, row)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %+v", s.Kind(), st)
		if !errors.Is(st.WriteErr, ErrStale) || st.CommitErr != nil {
			t.Errorf("paused holder's write: %v, commit: %v; want ErrStale and no commit", st.WriteErr, st.CommitErr)
		}
		if !errors.Is(st.Cause, dlock.ErrLockLost) {
			t.Errorf("paused holder's lock ended with %v, want ErrLockLost", st.Cause)
		}
		if st.Qty != 9 || st.RowFence <= st.StaleFence {
			t.Errorf("row: qty %d, fence %d; want 9 (the next holder's take only) and a fence above the stale %d",
				st.Qty, st.RowFence, st.StaleFence)
		}
	})
}

// The case the fence cannot see: a holder wrote while its lease lasted and
// commits after it ended. The transaction ran on the lock's context, so
// the lost lock has rolled it back: the commit fails and the row is as
// before.
func TestLockContextRollsBack(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		r := redistest.Start(t)
		ls := lockers(t, r.Addr, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		const row = "sku-ctx"
		if err := s.Reset(ctx, row, 10); err != nil {
			t.Fatal(err)
		}
		st, err := LostLockMidTx(ctx, ls[0], s, row)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %+v", s.Kind(), st)
		if st.WriteErr != nil {
			t.Fatalf("write while the lease lasted: %v", st.WriteErr)
		}
		if st.CommitErr == nil || !errors.Is(st.CommitErr, context.Canceled) && !errors.Is(st.CommitErr, sql.ErrTxDone) {
			t.Errorf("commit after the lock was lost: %v, want the context's cancellation or sql.ErrTxDone", st.CommitErr)
		}
		if !errors.Is(st.Cause, dlock.ErrLockLost) {
			t.Errorf("lock context's cause %v, want ErrLockLost", st.Cause)
		}
		if st.Qty != 10 || st.RowFence != 0 {
			t.Errorf("row: qty %d, fence %d after the refused commit; want 10 and 0, as before", st.Qty, st.RowFence)
		}
	})
}

// run with the program's flags, against a real Redis and SQLite, prints
// the figures of both orders; the right order's line shows every take
// committed and none lost.
func TestRunPrints(t *testing.T) {
	r := redistest.Start(t)
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, []string{"-redis", r.Addr, "-workers", "3", "-ops", "5", "-work", "1ms"}, &out); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	var right, wrong []string
	for line := range strings.Lines(out.String()) {
		switch f := strings.Fields(line); {
		case len(f) == 8 && f[0] == "right":
			right = f[:7] // without the time it took
		case len(f) == 8 && f[0] == "wrong":
			wrong = f
		}
	}
	// order committed refused failed expected actual lost
	if want := []string{"right", "15", "0", "0", "0", "0", "0"}; !slices.Equal(right, want) {
		t.Errorf("right order's figures %q, want %q", right, want)
	}
	if wrong == nil || !strings.HasPrefix(out.String(), "SQLite") {
		t.Errorf("output lacks the wrong order's figures or the database:\n%s", out.String())
	}
}

// Why Store.Read reads outside the transaction on SQLite: with the read
// inside it, SQLite's serializable transactions turn the wrong order's stale
// read into a failed write, never into a lost update. A deferred transaction
// that has read cannot start writing while another connection writes
// (SQLITE_BUSY at once, the busy timeout does not wait: the snapshot would be
// stale when it got the lock) nor after that one committed
// (SQLITE_BUSY_SNAPSHOT).
// The wrong order is still wrong there (takes fail that the right order
// commits), but it does not show the lost update that PostgreSQL's READ
// COMMITTED, or a read outside the transaction, gives.
func TestSQLiteReadInTxFailsInsteadOfLosing(t *testing.T) {
	s, err := OpenSQLite(filepath.Join(t.TempDir(), "stock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	r := redistest.Start(t)
	ls := lockers(t, r.Addr, 6)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// TakeWrong with the read as a statement of the transaction.
	wrongReadInTx := func(ctx context.Context, locker dlock.Locker, s *Store, id string, work time.Duration) error {
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := func() error {
			lock, err := locker.Acquire(ctx, "stock:"+id, dlock.WithTTL(5*time.Second))
			if err != nil {
				return err
			}
			defer lock.Release(ctx)
			var qty int64
			if err := tx.QueryRowContext(ctx, `SELECT qty FROM stock WHERE id = $1`, id).Scan(&qty); err != nil {
				return err
			}
			if err := sleep(ctx, work); err != nil {
				return err
			}
			return s.Write(ctx, tx, id, qty-1, lock.Fence())
		}(); err != nil {
			return err
		}
		return tx.Commit()
	}

	failedSome := false
	for run := 1; run <= 5 && !failedSome; run++ {
		f, err := Trial{Name: "wrong-in-tx", Take: wrongReadInTx, Store: s, Lockers: ls, Row: "sku-in-tx",
			Start: 1000, Ops: 10, Work: 2 * time.Millisecond}.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("run %d: %d committed, %d refused, %d failed (first: %v), lost %d", run, f.Committed, f.Refused, f.Failed, f.Err, f.Lost())
		if f.Lost() != 0 {
			t.Fatalf("lost %d updates with the read inside SQLite's transaction", f.Lost())
		}
		var se *sqlite.Error
		if f.Failed > 0 && (!errors.As(f.Err, &se) || se.Code()&0xff != 5) {
			t.Fatalf("failure %v, want SQLITE_BUSY (5) or an extended code of it", f.Err)
		}
		failedSome = f.Failed > 0
	}
	if !failedSome {
		t.Error("the wrong order with the read inside SQLite's transaction failed no take in 5 runs")
	}
}

// The window neither the fence nor the context closes, on PostgreSQL: a
// holder wrote while its lease lasted, and its commit, already on its way,
// lands after the lease ended. The next holder's plain read saw the row
// before that commit, so the next holder's write (a larger fence: accepted)
// overwrites it. A row lock in the read (SELECT … FOR UPDATE) makes the next
// holder's read wait for the commit instead, and nothing is lost.
func TestForUpdateClosesLateCommit(t *testing.T) {
	dsn := startPostgres(t)
	r := redistest.Start(t)
	for _, forUpdate := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain read", true: "for update"}[forUpdate], func(t *testing.T) {
			s, err := OpenPostgres(dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			ls := lockers(t, r.Addr, 2)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			row := fmt.Sprintf("sku-late-%t", forUpdate)
			if err := s.Reset(ctx, row, 10); err != nil {
				t.Fatal(err)
			}
			read := `SELECT qty FROM stock WHERE id = $1`
			if forUpdate {
				read += ` FOR UPDATE`
			}
			take := func(ctx context.Context, tx *sql.Tx, fence int64) error {
				var qty int64
				if err := tx.QueryRowContext(ctx, read, row).Scan(&qty); err != nil {
					return err
				}
				return s.Write(ctx, tx, row, qty-1, fence)
			}

			// The late holder writes within its lease, on a context the lock
			// does not end: its commit is on its way when the lease ends.
			late, err := ls[0].Acquire(ctx, "stock:"+row, dlock.WithTTL(pausedTTL), dlock.WithoutRenewal())
			if err != nil {
				t.Fatal(err)
			}
			lateTx, err := s.DB().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer lateTx.Rollback()
			if err := take(ctx, lateTx, late.Fence()); err != nil {
				t.Fatal(err)
			}
			if err := pauseTillLost(ctx, late); err != nil {
				t.Fatal(err)
			}

			// The next holder, in the right order, blocks on the late
			// holder's row lock: in its UPDATE (plain read) or its read.
			next := make(chan error, 1)
			go func() {
				next <- func() error {
					lock, err := ls[1].Acquire(ctx, "stock:"+row)
					if err != nil {
						return err
					}
					defer lock.Release(ctx)
					tx, err := s.DB().BeginTx(lock.Context(), nil)
					if err != nil {
						return err
					}
					defer tx.Rollback()
					if err := take(lock.Context(), tx, lock.Fence()); err != nil {
						return err
					}
					return tx.Commit()
				}()
			}()
			for waiting := 0; waiting == 0; {
				if err := s.DB().QueryRowContext(ctx,
					`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
					t.Fatalf("waiting for the next holder to block on the row: %v", err)
				}
				if err := sleep(ctx, 10*time.Millisecond); err != nil {
					t.Fatal("the next holder never blocked on the row")
				}
			}
			if err := lateTx.Commit(); err != nil {
				t.Fatalf("late commit: %v", err)
			}
			select {
			case err := <-next:
				if err != nil {
					t.Fatalf("next holder: %v", err)
				}
			case <-ctx.Done():
				t.Fatal("next holder did not finish")
			}
			qty, err := s.Qty(ctx, row)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("two takes committed, row %d", qty)
			if want := map[bool]int64{false: 9, true: 8}[forUpdate]; qty != want {
				t.Errorf("row %d after two committed takes, want %d", qty, want)
			}
		})
	}
}

// Out-of-range flags are refused with the flag and its bounds, before any
// connection is made.
func TestRunRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-workers", "0"}, "-workers 0: must be in 1..100"},
		{[]string{"-workers", "101"}, "-workers 101: must be in 1..100"},
		{[]string{"-ops", "0"}, "-ops 0: must be in 1..10000"},
	} {
		err := run(context.Background(), append([]string{"-redis", "127.0.0.1:1"}, tc.args...), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run %q: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// Redis comes from $DLOCK_URL, as the CLI and the other examples read it,
// when -redis is not given.
func TestRunReadsDlockURL(t *testing.T) {
	r := redistest.Start(t)
	t.Setenv("DLOCK_URL", "redis://"+r.Addr+"/0")
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, []string{"-workers", "2", "-ops", "2", "-work", "1ms"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Redis "+r.Addr+";") {
		t.Fatalf("run did not use $DLOCK_URL's %s:\n%s", r.Addr, out.String())
	}
}

// A Redis that is down is one error naming the address and where it came
// from, at once, before any worker dials.
func TestRunSaysWhichRedisIsDown(t *testing.T) {
	start := time.Now()
	err := run(context.Background(), []string{"-redis", "127.0.0.1:1"}, io.Discard)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "Redis at 127.0.0.1:1") || !strings.Contains(err.Error(), "$DLOCK_URL") {
		t.Fatalf("run = %v; want the address and the $DLOCK_URL hint", err)
	}
	if took > 5*time.Second {
		t.Errorf("took %v to say Redis is down", took.Round(time.Millisecond))
	}
}
