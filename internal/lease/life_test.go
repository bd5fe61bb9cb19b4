package lease

import (
	"errors"
	"testing"
	"time"
)

// A lock ends once: Released is final, Lost may still become Released (a
// Release after the loss), and the first cause stays the cause.
func TestLifeEndsOnceFirstCauseStays(t *testing.T) {
	errLost, errReleased := errors.New("lost"), errors.New("released")
	for _, tc := range []struct {
		name   string
		steps  []Phase
		moved  []bool
		phase  Phase
		reason error
	}{
		{"released", []Phase{Released}, []bool{true}, Released, errReleased},
		{"lost", []Phase{Lost}, []bool{true}, Lost, errLost},
		{"lost then released", []Phase{Lost, Released}, []bool{true, true}, Released, errLost},
		{"released then lost", []Phase{Released, Lost}, []bool{true, false}, Released, errReleased},
		{"lost twice", []Phase{Lost, Lost}, []bool{true, false}, Lost, errLost},
		{"released twice", []Phase{Released, Released}, []bool{true, false}, Released, errReleased},
		{"back to held", []Phase{Held}, []bool{false}, Held, nil},
	} {
		var f Life
		for i, to := range tc.steps {
			cause := errReleased
			if to == Lost {
				cause = errLost
			}
			if got := f.End(to, cause); got != tc.moved[i] {
				t.Errorf("%s: step %d (to %d) moved %v, want %v", tc.name, i, to, got, tc.moved[i])
			}
		}
		if f.Phase() != tc.phase || f.Cause() != tc.reason || f.Held() != (tc.phase == Held) {
			t.Errorf("%s: phase %d cause %v, want %d %v", tc.name, f.Phase(), f.Cause(), tc.phase, tc.reason)
		}
	}
}

// The deadline timer fires while held, and never once the lock has ended;
// Rearm of an ended lock does not start it again.
func TestLifeDeadlineStopsAtEnd(t *testing.T) {
	fired := make(chan struct{}, 1)
	var f Life
	f.Arm(20*time.Millisecond, func() { fired <- struct{}{} })
	select {
	case <-fired:
	case <-time.After(2 * time.Second):
		t.Fatal("the deadline of a held lock did not fire")
	}
	f.Rearm(20 * time.Millisecond)
	f.End(Released, errors.New("released"))
	f.Rearm(time.Millisecond)
	select {
	case <-fired:
		t.Fatal("the deadline fired after the lock ended")
	case <-time.After(200 * time.Millisecond):
	}
}
