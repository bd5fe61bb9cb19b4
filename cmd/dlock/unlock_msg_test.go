package main

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// unlock's errors name the commands a user can type: the library calls its
// first step "inspect", which read like a command the user had not run.
func TestUnlockErrorsNameTheCommand(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	hold(t, srv, rdb, "keep me")

	r := dlockRun(t, srv, "unlock", "--force", "--yes", "free")
	if r.code != exitNotFound || !strings.Contains(r.stderr, `unlock "free": not held`) || strings.Contains(r.stderr, `inspect "free"`) {
		t.Errorf("unlock of a free lock: exit %d, stderr %q; want exit %d naming unlock, not inspect", r.code, r.stderr, exitNotFound)
	}
	r = dlockRun(t, srv, "unlock", "keep me")
	if r.code != exitUsage || !strings.Contains(r.stderr, "dlock inspect 'keep me'") || !strings.Contains(r.stderr, "dlock unlock --force 'keep me'") {
		t.Errorf("unlock without --force: exit %d, stderr %q; want the inspect and unlock commands, quoted for the shell", r.code, r.stderr)
	}
}

// A busy --listen port is the machine's state, not a usage error: exit 3.
func TestServeBusyPortExits3(t *testing.T) {
	srv := redistest.Start(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	r := dlockRun(t, srv, "serve", "--listen", ln.Addr().String())
	if r.code != exitRedis || !strings.Contains(r.stderr, "cannot listen on "+ln.Addr().String()) || strings.Contains(r.stderr, "--help") {
		t.Errorf("serve on a busy port: exit %d, stderr %q; want %d and the reason", r.code, r.stderr, exitRedis)
	}
	if r := dlockRun(t, srv, "serve", "--listen", "7480"); r.code != exitUsage {
		t.Errorf("serve --listen 7480 (no host:port): exit %d, stderr %q; want %d", r.code, r.stderr, exitUsage)
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"jobs:nightly": "jobs:nightly", "a b": "'a b'", "it's": `'it'\''s'`, "": "''", "x;rm": "'x;rm'",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// A read-only dlock serve tells the operator how to enable force unlock in
// its own terms: the environment variable, not a Go option.
func TestServeReadOnlyNamesTokenVariable(t *testing.T) {
	srv := redistest.Start(t)
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	startDlock(t, srv, "serve", "--listen", "127.0.0.1:"+strconv.Itoa(port))
	get := func(method, path string) (int, string) {
		req, _ := http.NewRequest(method, base+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor(t, "serve answering", func() bool { code, _ := get("GET", "/healthz"); return code == http.StatusOK })
	if code, page := get("GET", "/"); code != http.StatusOK || !strings.Contains(page, "Read-only view") || !strings.Contains(page, adminTokenEnv) {
		t.Errorf("read-only page: %d, does not name %s:\n%s", code, adminTokenEnv, page)
	}
	if code, body := get("POST", "/api/locks/x/unlock?fence=1"); code != http.StatusForbidden || !strings.Contains(body, adminTokenEnv) {
		t.Errorf("unlock on a read-only serve: %d %s; want 403 naming %s", code, body, adminTokenEnv)
	}
}

// unlock without --force of a lock nobody holds says so and exits as "not
// held" does: the lecture about breaking a holder's lock is for a lock
// that has one.
func TestUnlockFreeLockWithoutForceSaysNotHeld(t *testing.T) {
	srv := redistest.Start(t)
	r := dlockRun(t, srv, "unlock", "free")
	if r.code != exitNotFound || !strings.Contains(r.stderr, `"free" is not held`) || strings.Contains(r.stderr, "--force") ||
		strings.Count(r.stderr, "\n") > 2 {
		t.Errorf("unlock of a free lock: exit %d, stderr %q; want %d in a line or two, without the --force lecture", r.code, r.stderr, exitNotFound)
	}
}
