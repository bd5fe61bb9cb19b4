package dlock

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/observe"
)

// WithObserver adds an observer of the client's locks. Several may be added;
// each gets every event.
func WithObserver(o observe.Observer) Option {
	return optionFunc(func(c *config) {
		if o != nil {
			c.observers = append(c.observers, o)
		}
	})
}

// WithLogger logs through l: lost locks and failed renewals at Warn, failed
// acquisitions and releases (other than busy) at Warn, the rest at Debug.
// Tokens are never logged, fences are. A warning about the Redis server (a
// maxmemory-policy that can evict held locks) goes to l too, or to
// slog.Default() without WithLogger.
func WithLogger(l *slog.Logger) Option {
	logs := WithObserver(logObserver{l: l})
	return optionFunc(func(c *config) {
		logs.apply(c)
		c.logger = l
	})
}

// observers fans events out; a nil observers costs one length check.
type observers []observe.Observer

func (os observers) acquire(ctx context.Context, name string, start time.Time, l *redisLock, err error) {
	if len(os) == 0 {
		return
	}
	e := observe.AcquireEvent{Name: name, Wait: time.Since(start), Err: err}
	switch {
	case err == nil:
		e.Result, e.Fence = observe.ResultAcquired, l.fence
	case errors.Is(err, context.Canceled):
		e.Result = observe.ResultCancelled
	case errors.Is(err, context.DeadlineExceeded):
		e.Result = observe.ResultTimeout
	case errors.Is(err, ErrNotObtained):
		var busy *NotObtainedError
		e.Result = observe.ResultBusy
		if errors.As(err, &busy) && busy.waited {
			e.Result = observe.ResultTimeout
		}
	default:
		e.Result = observe.ResultError
	}
	for _, o := range os {
		o.OnAcquire(ctx, e)
	}
}

func (os observers) renew(e observe.RenewEvent) {
	for _, o := range os {
		o.OnRenew(e)
	}
}

func (os observers) lost(e observe.LostEvent) {
	for _, o := range os {
		o.OnLost(e)
	}
}

func (os observers) holdWarning(e observe.HoldWarningEvent) {
	for _, o := range os {
		o.OnHoldWarning(e)
	}
}

func (os observers) release(ctx context.Context, e observe.ReleaseEvent) {
	for _, o := range os {
		o.OnRelease(ctx, e)
	}
}

// logObserver is WithLogger.
type logObserver struct {
	observe.BaseObserver
	l *slog.Logger
}

func (o logObserver) OnAcquire(ctx context.Context, e observe.AcquireEvent) {
	level := slog.LevelDebug
	if e.Result == observe.ResultError {
		level = slog.LevelWarn
	}
	attrs := []slog.Attr{slog.String("lock", e.Name), slog.String("result", string(e.Result)), slog.Duration("wait", e.Wait)}
	if e.Result == observe.ResultAcquired {
		attrs = append(attrs, slog.Int64("fence", e.Fence))
	} else if e.Err != nil {
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	o.l.LogAttrs(ctx, level, "dlock acquire", attrs...)
}

func (o logObserver) OnRenew(e observe.RenewEvent) {
	if e.Result == observe.ResultOK {
		return // thousands a second with many locks: nothing to act on
	}
	attrs := []slog.Attr{slog.String("lock", e.Name), slog.Int64("fence", e.Fence), slog.String("result", string(e.Result))}
	if e.Err != nil {
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	o.l.LogAttrs(context.Background(), slog.LevelWarn, "dlock renewal failed", attrs...)
}

func (o logObserver) OnLost(e observe.LostEvent) {
	o.l.LogAttrs(context.Background(), slog.LevelWarn, "dlock lock lost",
		slog.String("lock", e.Name), slog.Int64("fence", e.Fence), slog.String("reason", string(e.Reason)),
		slog.Duration("held", e.Held), slog.String("cause", e.Cause.Error()))
}

func (o logObserver) OnRelease(ctx context.Context, e observe.ReleaseEvent) {
	level := slog.LevelDebug
	if e.Result == observe.ResultError || (e.Result == observe.ResultNotHeld && !e.AfterLoss) {
		level = slog.LevelWarn
	}
	attrs := []slog.Attr{slog.String("lock", e.Name), slog.Int64("fence", e.Fence), slog.String("result", string(e.Result)), slog.Duration("held", e.Held)}
	if e.Err != nil {
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	o.l.LogAttrs(ctx, level, "dlock release", attrs...)
}

func (o logObserver) OnHoldWarning(e observe.HoldWarningEvent) {
	o.l.LogAttrs(context.Background(), slog.LevelWarn, "dlock lock held past its warning threshold",
		slog.String("lock", e.Name), slog.Int64("fence", e.Fence), slog.Duration("held", e.Held),
		slog.Duration("threshold", e.Threshold), slog.Duration("ttl", e.TTL))
}
