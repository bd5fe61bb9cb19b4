package dlock

import (
	"context"
	"errors"
	"fmt"
)

// Do runs fn while holding the lock name: it acquires (waiting as Acquire
// does, with the same options), runs fn, and releases when fn returns or
// panics (the panic goes on after the release).
//
// fn's context is cancelled when ctx is, and also the moment the lock is
// lost; check it before each step that must be exclusive. When the lock was
// lost while fn ran, Do returns fn's error joined with an error matching
// ErrLockLost: the work may not have been exclusive, and the caller must
// treat it so (retry idempotently, or check the fence at the resource).
func (c *Client) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...AcquireOption) (err error) {
	l, err := c.Acquire(ctx, name, opts...)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(l.Context(), func() { cancel(context.Cause(l.Context())) })
	defer func() {
		p := recover()
		stop()
		relErr := l.Release(ctx)
		cause := context.Cause(l.Context())
		switch {
		case errors.Is(cause, ErrLockLost):
			err = errors.Join(err, opError("do", name, cause))
		case errors.Is(relErr, ErrNotHeld):
			// Gone before the release, though no renewal noticed: lost all
			// the same.
			err = errors.Join(err, opError("do", name, fmt.Errorf("%w: gone at release", ErrLockLost)))
		case relErr != nil:
			err = errors.Join(err, relErr)
		}
		cancel(nil)
		if p != nil {
			panic(p)
		}
	}()
	return fn(fctx)
}
