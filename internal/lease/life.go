package lease

import "time"

// Phase is where a held lock is in its life: Held, then Released or Lost.
type Phase uint8

const (
	Held Phase = iota
	Released
	Lost
)

// Life is a held lock's state machine and its deadline timer: one copy of
// the rules for every Locker. A lock embeds it and guards it with its own
// mutex: every method must be called with that mutex held, and the timer's
// function takes it itself.
//
// The rules: a lock ends once, as Released or Lost; a lost lock may still be
// released (its holder's Release after the loss), nothing else moves; the
// first cause stays the cause, so a Release that runs while a loss is being
// reported does not make the loss read as a release; the deadline timer
// stops when the lock ends. Observers and the lock's context are the
// caller's: End reports whether it moved, and the caller tells them, after
// letting its mutex go, observers before the context.
type Life struct {
	phase    Phase
	cause    error
	deadline *time.Timer
}

// Phase returns where the lock is.
func (f *Life) Phase() Phase { return f.phase }

// Held reports whether the lock has not ended.
func (f *Life) Held() bool { return f.phase == Held }

// Cause returns why the lock ended (its first cause), or nil while held.
func (f *Life) Cause() error { return f.cause }

// End moves the lock to to (Released or Lost) with cause, and reports
// whether it moved: not from Released, nor from Lost to Lost.
func (f *Life) End(to Phase, cause error) bool {
	if f.phase == Released || (f.phase == Lost && to == Lost) || to == Held {
		return false
	}
	f.phase = to
	if f.cause == nil {
		f.cause = cause
	}
	if f.deadline != nil {
		f.deadline.Stop()
	}
	return true
}

// Arm starts the deadline timer: fire runs after d, on its own goroutine,
// unless the lock ends first. Arm is called once per lock.
func (f *Life) Arm(d time.Duration, fire func()) {
	f.deadline = time.AfterFunc(d, fire)
}

// Rearm moves the deadline to d from now, while the lock is held: a
// renewal moved it while the timer was firing.
func (f *Life) Rearm(d time.Duration) {
	if f.phase == Held && f.deadline != nil {
		f.deadline.Reset(d)
	}
}

// Disarm stops the deadline timer without ending the lock: the lock ends
// by other means (its Release is under way), or a test plays a timer that
// has not run yet.
func (f *Life) Disarm() {
	if f.deadline != nil {
		f.deadline.Stop()
	}
}
