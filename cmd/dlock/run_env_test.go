package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// dlockRunEnv runs dlock with args in the environment env (cleanEnv()
// plus the test's variables) and returns its exit code and output.
func dlockRunEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := command(ctx, nil, args...)
	cmd.Env = append(cleanEnv(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("dlock %v: %v", args, err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
}

// envOf parses env(1)'s output into a map.
func envOf(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}

// The child of run does not get the credentials dlock was given: a child
// that prints its environment (or hands it to a crash reporter, or runs
// code it did not write) must not be able to read Redis with dlock's
// password, force-unlock with the admin token, or release the lock with
// its token. --pass-env gives it those it is meant to have, by name.
func TestRunChildEnvHasNoSecrets(t *testing.T) {
	const pw = "pw-Zq8x-never-in-child"
	srv := redistest.Start(t)
	// Set once the server is up: redistest's readiness PING has no password.
	if err := srv.Client(t).ConfigSet(context.Background(), "requirepass", pw).Err(); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"DLOCK_PASSWORD=" + pw,
		"REDISCLI_AUTH=" + pw,
		"DLOCK_ADMIN_TOKEN=admin-" + pw,
		"DLOCK_URL=redis://:" + pw + "@" + srv.Addr + "/0",
		"REDIS_URL=redis://app:" + pw + "@" + srv.Addr,
		"KEEP_ME=plain",
	}
	r := dlockRunEnv(t, env, "--addr", srv.Addr, "run", "env-secrets", "--", "env")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if strings.Contains(r.stdout, pw) {
		t.Errorf("the child's environment holds the password:\n%s", r.stdout)
	}
	got := envOf(r.stdout)
	for _, k := range []string{"DLOCK_PASSWORD", "REDISCLI_AUTH", "DLOCK_ADMIN_TOKEN", "DLOCK_TOKEN"} {
		if v, ok := got[k]; ok {
			t.Errorf("the child got %s=%q", k, v)
		}
	}
	// The URLs still say where Redis is, without the password.
	if want := "redis://" + srv.Addr + "/0"; got["DLOCK_URL"] != want {
		t.Errorf("DLOCK_URL = %q, want %q", got["DLOCK_URL"], want)
	}
	if want := "redis://app@" + srv.Addr; got["REDIS_URL"] != want {
		t.Errorf("REDIS_URL = %q, want %q", got["REDIS_URL"], want)
	}
	if got["DLOCK_NAME"] != "env-secrets" || got["DLOCK_FENCE"] == "" || got["KEEP_ME"] != "plain" {
		t.Errorf("the child lacks DLOCK_NAME, DLOCK_FENCE or KEEP_ME:\n%s", r.stdout)
	}

	// Opt in, by name: a child that is itself a dlock, or that releases
	// the lock with its token.
	r = dlockRunEnv(t, env, "--addr", srv.Addr, "run", "--pass-env", "DLOCK_PASSWORD", "--pass-env", "DLOCK_URL",
		"--pass-env", "DLOCK_TOKEN", "env-secrets", "--", "env")
	if r.code != 0 {
		t.Fatalf("--pass-env: exit %d: %s", r.code, r.stderr)
	}
	got = envOf(r.stdout)
	if got["DLOCK_PASSWORD"] != pw || got["DLOCK_URL"] != "redis://:"+pw+"@"+srv.Addr+"/0" || len(got["DLOCK_TOKEN"]) != 32 {
		t.Errorf("--pass-env DLOCK_PASSWORD, DLOCK_URL, DLOCK_TOKEN: the child got %q, %q and a token of %d characters",
			got["DLOCK_PASSWORD"], got["DLOCK_URL"], len(got["DLOCK_TOKEN"]))
	}
	if _, ok := got["REDISCLI_AUTH"]; ok {
		t.Error("REDISCLI_AUTH reached the child though only DLOCK_PASSWORD was passed")
	}

	// A nested dlock given the password works: what --pass-env is for.
	r = dlockRunEnv(t, env, "--addr", srv.Addr, "run", "--pass-env", "DLOCK_PASSWORD", "outer", "--",
		bin, "--addr", srv.Addr, "run", "inner", "--", "true")
	if r.code != 0 {
		t.Errorf("nested dlock with --pass-env DLOCK_PASSWORD: exit %d: %s", r.code, r.stderr)
	}

	// A variable run does not withhold is a mistake worth hearing about.
	r = dlockRunEnv(t, env, "--addr", srv.Addr, "run", "--pass-env", "HOME", "env-secrets", "--", "true")
	if r.code != exitUsage || !strings.Contains(r.stderr, "HOME") || !strings.Contains(r.stderr, "DLOCK_PASSWORD") {
		t.Errorf("--pass-env HOME: exit %d, want %d naming HOME and what can be passed; stderr: %s", r.code, exitUsage, r.stderr)
	}
}

// The default owner is dlock's host and pid and what it runs, "dlock run
// CMD", as dlock lock's is "dlock lock": the pid and the command of one
// process, not dlock's pid beside the child's name.
func TestRunDefaultOwnerIsDlockAndCommand(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	b := hold(t, srv, rdb, "owned")
	host, _ := os.Hostname()
	want := host + "/" + strconv.Itoa(b.cmd.Process.Pid) + " dlock run sleep"
	if r := dlockRun(t, srv, "inspect", "owned"); !strings.Contains(r.stdout, "owner:    "+want+"\n") {
		t.Errorf("inspect of a dlock run: want owner %q in\n%s", want, r.stdout)
	}
	l := startDlock(t, srv, "lock", "held")
	waitFor(t, "lock held taken", func() bool { return rdb.Exists(context.Background(), lockKey("held")).Val() == 1 })
	want = host + "/" + strconv.Itoa(l.cmd.Process.Pid) + " dlock lock"
	if r := dlockRun(t, srv, "inspect", "held"); !strings.Contains(r.stdout, "owner:    "+want+"\n") {
		t.Errorf("inspect of a dlock lock: want owner %q in\n%s", want, r.stdout)
	}
}
