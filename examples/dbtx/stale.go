package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
)

// pausedTTL is the lease of the paused holders below: short, so the pause
// is short, and renewal off, so that nothing extends it.
const pausedTTL = 500 * time.Millisecond

// Stale is what happened to a holder paused past its lease.
type Stale struct {
	StaleFence int64 // the paused holder's fence
	RowFence   int64 // the fence that wrote the row last
	Qty        int64 // the row's quantity afterwards
	WriteErr   error // the paused holder's write (ErrStale: refused)
	CommitErr  error // the paused holder's commit (LostLockMidTx)
	Cause      error // why the paused holder's lock ended
}

// StaleWrite plays a holder paused (GC, SIGSTOP, a slow disk) between its
// read and its write, past its lease: the next holder takes the lock, takes
// a unit and commits. Then the paused holder wakes and writes. Its
// transaction does not run on the lock's context, so that only the fence
// column can stop it; it does, and the paused holder rolls back.
func StaleWrite(ctx context.Context, paused, next dlock.Locker, s *Store, row string) (Stale, error) {
	lock, err := paused.Acquire(ctx, "stock:"+row, dlock.WithTTL(pausedTTL), dlock.WithoutRenewal())
	if err != nil {
		return Stale{}, err
	}
	defer lock.Release(ctx) // reports ErrNotHeld: the lease is long gone
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		return Stale{}, err
	}
	defer tx.Rollback()
	qty, err := s.Read(ctx, tx, row)
	if err != nil {
		return Stale{}, err
	}

	if err := pauseTillLost(ctx, lock); err != nil {
		return Stale{}, err
	}
	if err := TakeRight(ctx, next, s, row, 0); err != nil {
		return Stale{}, fmt.Errorf("next holder: %w", err)
	}

	st := Stale{StaleFence: lock.Fence(), Cause: context.Cause(lock.Context())}
	st.WriteErr = s.Write(ctx, tx, row, qty-1, lock.Fence())
	if st.WriteErr == nil {
		st.CommitErr = tx.Commit()
	}
	return st, s.row(ctx, row, &st)
}

// LostLockMidTx plays a holder that wrote while its lease lasted and was
// paused past it before committing: a write the fence cannot refuse, since
// no newer holder wrote first. Its transaction runs on the lock's context,
// so the lock's end rolled it back, and the commit fails.
func LostLockMidTx(ctx context.Context, locker dlock.Locker, s *Store, row string) (Stale, error) {
	lock, err := locker.Acquire(ctx, "stock:"+row, dlock.WithTTL(pausedTTL), dlock.WithoutRenewal())
	if err != nil {
		return Stale{}, err
	}
	defer lock.Release(ctx)
	lctx := lock.Context()
	tx, err := s.DB().BeginTx(lctx, nil)
	if err != nil {
		return Stale{}, err
	}
	defer tx.Rollback()
	qty, err := s.Read(lctx, tx, row)
	if err != nil {
		return Stale{}, err
	}
	st := Stale{StaleFence: lock.Fence()}
	if st.WriteErr = s.Write(lctx, tx, row, qty-1, lock.Fence()); st.WriteErr != nil {
		return st, s.row(ctx, row, &st)
	}

	if err := pauseTillLost(ctx, lock); err != nil {
		return Stale{}, err
	}
	st.Cause = context.Cause(lctx)
	st.CommitErr = tx.Commit()
	return st, s.row(ctx, row, &st)
}

// pauseTillLost stands for the pause: it returns once the lock's lease has
// ended (its context is done), within a bound.
func pauseTillLost(ctx context.Context, lock dlock.Lock) error {
	t := time.NewTimer(10 * pausedTTL)
	defer t.Stop()
	select {
	case <-lock.Context().Done():
		return nil
	case <-t.C:
		return errors.New("the paused holder's lease did not end in time")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// row reads the row's quantity and fence into st.
func (s *Store) row(ctx context.Context, id string, st *Stale) error {
	return s.DB().QueryRowContext(ctx, `SELECT qty, fence FROM stock WHERE id = $1`, id).Scan(&st.Qty, &st.RowFence)
}
