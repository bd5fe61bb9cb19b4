package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
)

// A min hold on several names is refused: a rollback would keep the names
// already taken for the whole min hold, though no job ran under them, and a
// cron tick on every machine would be skipped for one busy name.
func TestAcquireAllRefusesMinHold(t *testing.T) {
	c, rdb, _ := setup(t)
	_, err := dlock.AcquireAll(bg, c, []string{"mh:a", "mh:b"}, dlock.WithMinHold(3*time.Second), dlock.WithWait(0))
	if !errors.Is(err, dlock.ErrInvalidOption) {
		t.Fatalf("AcquireAll with WithMinHold: %v, want ErrInvalidOption", err)
	}
	if n := rdb.Exists(bg, "dlock:{mh:a}", "dlock:{mh:b}").Val(); n != 0 {
		t.Fatalf("%d keys written by a refused AcquireAll", n)
	}
	// One name has no rollback: allowed.
	m, err := dlock.AcquireAll(bg, c, []string{"mh:a"}, dlock.WithMinHold(50*time.Millisecond))
	if err != nil {
		t.Fatalf("AcquireAll of one name with WithMinHold: %v", err)
	}
	_ = m.Release(bg)
}

// A name kept for its min hold refuses a permit on the double as in Redis.
func TestPermitOnKeptNameDouble(t *testing.T) {
	c, _, _ := setup(t)
	d := dlocktest.MustNew()
	for _, l := range []dlock.Locker{c, d} {
		lk, err := l.TryAcquire(bg, "mh:kept", dlock.WithMinHold(2*time.Second), dlock.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := lk.Release(bg); err != nil {
			t.Fatal(err)
		}
		if p, err := l.TryAcquire(bg, "mh:kept", dlock.WithPermits(2)); p != nil || !errors.Is(err, dlock.ErrMismatch) {
			t.Errorf("%T: a permit of a name kept for its min hold: %v, %v; want ErrMismatch", l, p, err)
		}
	}
}
