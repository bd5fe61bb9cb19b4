package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/lockerkit"
)

func TestExitCode(t *testing.T) {
	busy := fmt.Errorf("wrapped: %w", &dlock.NotObtainedError{Name: "x"})
	tests := []struct {
		name     string
		err      error
		conflict int
		want     int
	}{
		{"nil", nil, exitConflict, exitOK},
		{"child code", &exitError{code: 7}, exitConflict, 7},
		{"child code 2 is not usage", &exitError{code: 2}, exitConflict, 2},
		{"usage", usagef("bad"), exitConflict, exitUsage},
		{"invalid ttl", fmt.Errorf("x: %w", dlock.ErrInvalidTTL), exitConflict, exitUsage},
		{"invalid name", fmt.Errorf("x: %w", dlock.ErrInvalidName), exitConflict, exitUsage},
		{"busy", busy, exitConflict, exitConflict},
		{"busy with -E", busy, 75, 75},
		{"wait ran out in an outage", &dlock.Error{Op: "acquire", Name: "x", Err: lockerkit.NewNotObtainedError("x", 0, nil).
			DuringOutage(fmt.Errorf("dial tcp 127.0.0.1:1: %w", dlock.ErrUnavailable), time.Second)},
			75, exitRedis},
		{"lost", &lostError{name: "x", cause: dlock.ErrLockLost}, exitConflict, exitLost},
		{"not locked", fmt.Errorf("x: %w", dlock.ErrNotHeld), exitConflict, exitNotFound},
		{"not held", fmt.Errorf("x: %w", dlock.ErrNotHeld), exitConflict, exitNotFound},
		{"redis", errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), exitConflict, exitRedis},
		{"wrong type", fmt.Errorf("x: %w", dlock.ErrWrongType), exitConflict, exitRedis},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := exitCode(tt.err, tt.conflict); got != tt.want {
				t.Errorf("exitCode(%v, %d) = %d, want %d", tt.err, tt.conflict, got, tt.want)
			}
		})
	}
}

// Commands run in the test process too, with their output in buffers: the
// command tree takes its dependencies as arguments.
func TestExecuteInProcess(t *testing.T) {
	tests := []struct {
		args       []string
		want       int
		wantStderr string
	}{
		{[]string{"nosuch"}, exitUsage, `unknown command "nosuch"`},
		{[]string{"lsit"}, exitUsage, "did you mean list?"},
		{[]string{"unlock", "x"}, exitUsage, "without --force"},
		{[]string{"run", "x"}, exitUsage, "needs a COMMAND"},
		{[]string{"run", "a", "--ttl", "5s", "true"}, exitUsage, "flags go before NAME"},
		{[]string{"--timeout", "0s", "list"}, exitUsage, "--timeout"},
		{[]string{"--url", "http://x", "list"}, exitUsage, "invalid Redis URL"},
		{[]string{"demo", "--pause", "100ms"}, exitUsage, "longer than --ttl"},
		{[]string{"torture", "--workers", "1"}, exitUsage, "--workers 1"},
		{[]string{"torture", "--local", "--addr", "127.0.0.1:1"}, exitUsage, "excludes --url and --addr"},
		{[]string{"torture", "--scenario", "evict"}, exitUsage, `"evict" needs --local`},
		{[]string{"torture", "--scenario", "bogus"}, exitUsage, "want one of kill, pause"},
		{[]string{"torture", "--cluster"}, exitUsage, "make torture"},
		{[]string{"torture", "--addr", "a:1", "--addr", "b:1"}, exitUsage, "make torture"},
		{[]string{"torture", "--master-name", "m"}, exitUsage, "make torture"},
		{[]string{"torture", "--tls"}, exitUsage, "TLS"},
		{[]string{"--url", "unix:///tmp/x.sock", "torture"}, exitUsage, "unix socket"},
		{[]string{"torture", "--addr", "127.0.0.1:1"}, exitRedis, "Redis at 127.0.0.1:1"},
		{[]string{"help"}, exitOK, ""},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		d := deps{stdout: &out, stderr: &errb, getenv: func(string) string { return "" },
			environ: func() []string { return nil }, self: func() (string, error) { return bin, nil }}
		code := execute(context.Background(), tt.args, d)
		if code != tt.want || !strings.Contains(errb.String(), tt.wantStderr) {
			t.Errorf("dlock %v: exit %d, stderr %q; want exit %d, stderr with %q", tt.args, code, errb.String(), tt.want, tt.wantStderr)
		}
		if tt.want == exitOK && !strings.Contains(out.String(), "Exit codes:") {
			t.Errorf("dlock help does not document the exit codes:\n%s", out.String())
		}
	}
}
