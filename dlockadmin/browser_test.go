package dlockadmin_test

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockadmin"
	"github.com/dlock-go/dlock/internal/redistest"
)

// chromiumHint is what to run when the browser is missing.
const chromiumHint = "apt-get install -y chromium (or run `make test`)"

// screenshotEnv names a file the browser test copies its screenshot to, for a
// person to look at; the test's own copy is removed with its temp directory.
const screenshotEnv = "DLOCKADMIN_SCREENSHOT"

// findChromium returns Debian's chromium, failing the test loudly when it is
// missing: a skipped browser test would pass without proving the page works.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "chromium"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Fatalf("chromium not found: install it with %s", chromiumHint)
	return ""
}

// runChromium runs headless chromium once with args after the common flags
// and returns its stdout. The run is bounded: a browser that hangs is killed
// with its whole process group (renderer, GPU and zygote children).
func runChromium(t *testing.T, bin, profile string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", // small /dev/shm in containers crashes the renderer
		"--user-data-dir=" + profile, "--window-size=1200,800",
	}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+profile, "XDG_CONFIG_HOME="+profile, "XDG_CACHE_HOME="+profile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	// Children left behind by a browser that exited on its own go too.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if ctx.Err() != nil {
		t.Fatalf("chromium %v did not finish in 60s; stderr:\n%s", args, tail(stderr.String()))
	}
	if err != nil {
		t.Fatalf("chromium %v: %v; stderr:\n%s", args, err, tail(stderr.String()))
	}
	return stdout.Bytes()
}

func tail(s string) string {
	if len(s) > 4000 {
		return "..." + s[len(s)-4000:]
	}
	return s
}

// TestBrowserRendersPage opens the page in a real headless Chromium: the DOM
// it renders shows the held locks, and a screenshot of it is a 1200x800 PNG.
func TestBrowserRendersPage(t *testing.T) {
	bin := findChromium(t)
	srv := redistest.Start(t)
	c := newClient(t, srv, dlock.WithOwner("billing-worker-7 (10.0.3.14/4242)"))
	const name = "invoice:2024-11:run"
	l := acquire(t, c, name)
	others := newClient(t, srv, dlock.WithOwner("search-indexer/981"))
	for _, n := range []string{"index:products", "index:users", "migrations"} {
		acquire(t, others, n)
		time.Sleep(5 * time.Millisecond)
	}
	addWaiters(t, srv, name, 2)
	addWaiters(t, srv, "index:users", 1)
	waitFor(t, "3 waiters", func() bool {
		a, err1 := c.Inspect(bg, name)
		b, err2 := c.Inspect(bg, "index:users")
		return err1 == nil && err2 == nil && a.Waiters == 2 && b.Waiters == 1
	})

	ts := httptest.NewServer(dlockadmin.MustNewHandler(c, dlockadmin.WithForceUnlock(adminSecret), dlockadmin.WithTitle("dlock — staging")))
	defer ts.Close()
	if !strings.HasPrefix(ts.URL, "http://127.0.0.1:") {
		t.Fatalf("test server at %s, want loopback", ts.URL)
	}

	dir := t.TempDir()
	dom := string(runChromium(t, bin, filepath.Join(dir, "profile-dom"), "--dump-dom", ts.URL+"/"))
	for _, want := range []string{name, "billing-worker-7 (10.0.3.14/4242)", "search-indexer/981", "Hottest names", "Longest holders", "Generated", "breaks mutual exclusion", l.Token()[:8]} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered DOM lacks %q:\n%s", want, tail(dom))
		}
	}
	if strings.Contains(dom, l.Token()) {
		t.Errorf("rendered DOM holds the full token")
	}

	shot := filepath.Join(dir, "page.png")
	runChromium(t, bin, filepath.Join(dir, "profile-shot"), "--screenshot="+shot, ts.URL+"/")
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1200 || b.Dy() != 800 {
		t.Errorf("screenshot is %dx%d, want 1200x800", b.Dx(), b.Dy())
	}
	if keep := os.Getenv(screenshotEnv); keep != "" {
		if err := copyFile(shot, keep); err != nil {
			t.Errorf("keep screenshot: %v", err)
		} else {
			t.Logf("screenshot kept at %s", keep)
		}
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}
