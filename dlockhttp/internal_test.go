package dlockhttp

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		holder time.Duration
		want   string
	}{
		{-time.Millisecond, ""}, // a key without expiry: no promise
		{0, ""},                 // unknown (a Locker that cannot tell): no promise
		{time.Millisecond, "1"},
		{999 * time.Millisecond, "1"},
		{time.Second, "1"},
		{time.Second + time.Millisecond, "2"},
		{9*time.Second + 990*time.Millisecond, "10"},
		{10 * time.Second, "10"},
		{24 * time.Hour, "86400"},
	} {
		if got := retryAfter(tc.holder); got != tc.want {
			t.Errorf("retryAfter(%v) = %q, want %q", tc.holder, got, tc.want)
		}
	}
}

func TestStatusMapping(t *testing.T) {
	busy := &dlock.NotObtainedError{Name: "n", HolderTTL: time.Second}
	defaults := defaultConfig()
	custom := defaultConfig()
	for _, o := range []Option{WithBusyStatus(423), WithInvalidNameStatus(422), WithUnavailableStatus(502)} {
		o.apply(&custom)
	}
	for _, tc := range []struct {
		err          error
		def, changed int
	}{
		{busy, 409, 423},
		{fmt.Errorf("dlock: acquire %q: %w", "n", busy), 409, 423},
		{fmt.Errorf("%w: empty", dlock.ErrInvalidName), 400, 422},
		{fmt.Errorf("%w: 1ns below the minimum", dlock.ErrInvalidTTL), 500, 500},
		{dlock.ErrWrongType, 500, 500},
		{dlock.ErrClosed, 503, 502},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), 503, 502},
	} {
		if got := defaults.status(tc.err); got != tc.def {
			t.Errorf("default status(%v) = %d, want %d", tc.err, got, tc.def)
		}
		if got := custom.status(tc.err); got != tc.changed {
			t.Errorf("custom status(%v) = %d, want %d", tc.err, got, tc.changed)
		}
	}
	if got := defaults.invalid; got != http.StatusBadRequest {
		t.Errorf("NameFunc errors answer %d, want 400", got)
	}
}
