package dlocktest_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
)

// Do reports a loss once: when fn returns its context's cause, the error
// Do returns says so once, not fn's copy and Do's own.
func TestDoReportsALossOnce(t *testing.T) {
	l, _ := manual(t)
	err := l.Do(bg, "job", func(ctx context.Context) error {
		if !l.Expire("job") {
			t.Error("nothing to expire")
		}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do = %v, want ErrLockLost", err)
	}
	var de *dlock.Error
	if !errors.As(err, &de) || de.Name != "job" {
		t.Fatalf("Do = %v: names no lock", err)
	}
	lost := "lock lost"
	if n := strings.Count(err.Error(), lost); n != 1 {
		t.Fatalf("Do's error says %q %d times: %q", lost, n, err)
	}
}
