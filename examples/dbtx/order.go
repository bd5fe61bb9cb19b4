package main

import (
	"context"
	"time"

	"github.com/dlock-go/dlock"
)

// Take is one unit of stock taken from row id: read the quantity, work,
// write the quantity less one. Both orders below do exactly this; only where
// the lock and the transaction begin and end differs.
type Take func(ctx context.Context, locker dlock.Locker, s *Store, id string, work time.Duration) error

// TakeRight is the order the guide teaches: acquire the lock, begin, read,
// write, commit, and only then release. The next holder reads the row after
// the commit. The transaction and its statements run on the lock's context:
// a lock lost mid-transaction (renewal failing, a pause past the lease)
// rolls the transaction back instead of letting it commit unprotected, and
// the fence in the UPDATE refuses a write made after a newer holder's, which
// the context may not have stopped in time (a pause between the check and
// the statement).
func TakeRight(ctx context.Context, locker dlock.Locker, s *Store, id string, work time.Duration) error {
	lock, err := locker.Acquire(ctx, "stock:"+id, dlock.WithTTL(5*time.Second))
	if err != nil {
		return err
	}
	// Release runs on a fresh, bounded context of its own: deferring it is
	// safe after ctx ended. A lock lost before has failed the commit.
	defer lock.Release(ctx)

	lctx := lock.Context()
	tx, err := s.DB().BeginTx(lctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // after Commit, a no-op

	qty, err := s.Read(lctx, tx, id)
	if err != nil {
		return err
	}
	if err := sleep(lctx, work); err != nil {
		return err
	}
	if err := s.Write(lctx, tx, id, qty-1, lock.Fence()); err != nil {
		return err
	}
	return tx.Commit()
}

// TakeWrong is the order that loses updates: begin, acquire the lock, read,
// write, release the lock, and only then commit, as a lock taken and
// released inside a function that runs in a transaction (Spring's
// @Transactional around a method that locks, or a Go helper handed a *sql.Tx)
// has it. Between the release and the commit the next holder may read the
// row: it reads the value before this holder's write, and its own write,
// fenced or not, overwrites it. Its fence is larger, so the fence does not
// help here: only the order does.
func TakeWrong(ctx context.Context, locker dlock.Locker, s *Store, id string, work time.Duration) error {
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // after Commit, a no-op

	if err := func() error {
		lock, err := locker.Acquire(ctx, "stock:"+id, dlock.WithTTL(5*time.Second))
		if err != nil {
			return err
		}
		defer lock.Release(ctx)
		// The statements may not run on the lock's context: it ends at the
		// release, before the commit, and database/sql would roll back.
		qty, err := s.Read(ctx, tx, id)
		if err != nil {
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

// sleep stands for the work between the read and the write (a price
// computed, another service asked), ending early with ctx.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
