package lease

import (
	"errors"
	"testing"
	"time"
)

// Retry tries until a try succeeds, gives up once the next try would start
// after until, and stops when done closes.
func TestRetryStopsAtSuccessHorizonOrClose(t *testing.T) {
	fail := errors.New("unreachable")
	never := make(chan struct{})

	n := 0
	Retry(time.Now().Add(time.Minute), never, func() error {
		if n++; n < 3 {
			return fail
		}
		return nil
	})
	if n != 3 {
		t.Errorf("%d tries, want 3: two failures, then the success", n)
	}

	n = 0
	start := time.Now()
	Retry(start.Add(100*time.Millisecond), never, func() error { n++; return fail })
	if d := time.Since(start); n < 2 || d > 2*time.Second {
		t.Errorf("%d tries in %v with a 100ms horizon: want a few, then stop", n, d)
	}

	closed := make(chan struct{})
	close(closed)
	n = 0
	Retry(time.Now().Add(time.Minute), closed, func() error { n++; return fail })
	if n != 1 {
		t.Errorf("%d tries after Close, want 1 (the one under way)", n)
	}

	for range 20 {
		if !Pause(0, closed) {
			t.Fatal("Pause of a wait already over reported Close: the work due now was dropped")
		}
	}
	if Pause(time.Minute, closed) {
		t.Error("Pause after Close waited instead of reporting it")
	}
}
