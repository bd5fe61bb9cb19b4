package dlocktest_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// The double's busy error names the holder as the Client's does: the
// exclusive holder's owner, readers, a full semaphore's permits, a name
// kept for its min hold, and the self-deadlock hint for the caller's own
// owner.
func TestBusyErrorNamesTheHolder(t *testing.T) {
	l, _ := manual(t)
	busy := func(name string, opts ...dlock.AcquireOption) *dlock.NotObtainedError {
		t.Helper()
		lk, err := l.TryAcquire(bg, name, opts...)
		var e *dlock.NotObtainedError
		if lk != nil || !errors.As(err, &e) {
			t.Fatalf("TryAcquire(%q) = %v, %v; want a *NotObtainedError", name, lk, err)
		}
		return e
	}
	mustTry(t, l, "invoice", dlock.WithOwner("billing-7"))
	if e := busy("invoice"); e.Kind != dlock.KindExclusive || e.Owner != "billing-7" || e.Self || !strings.Contains(e.Error(), `held by "billing-7"`) {
		t.Errorf("exclusive: %+v: %v", *e, e)
	}
	if e := busy("invoice", dlock.WithOwner("billing-7")); !e.Self {
		t.Errorf("the caller's own owner: %+v", *e)
	}
	mustTry(t, l, "catalog", dlock.WithShared())
	mustTry(t, l, "catalog", dlock.WithShared())
	if e := busy("catalog"); e.Kind != dlock.KindShared || e.Readers != 2 || e.Owner != "" {
		t.Errorf("shared: %+v", *e)
	}
	mustTry(t, l, "pool", dlock.WithPermits(1))
	if e := busy("pool", dlock.WithPermits(1)); e.Kind != dlock.KindSemaphore || e.Held != 1 || e.Permits != 1 {
		t.Errorf("semaphore: %+v", *e)
	}
	kept := mustTry(t, l, "report", dlock.WithMinHold(time.Minute))
	if err := kept.Release(bg); err != nil {
		t.Fatal(err)
	}
	if e := busy("report"); e.Kind != dlock.KindExclusive || !e.MinHold {
		t.Errorf("kept for its min hold: %+v", *e)
	}
}
