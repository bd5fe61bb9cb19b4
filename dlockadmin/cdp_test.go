//go:build linux

package dlockadmin_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// browser is a headless Chromium driven over the DevTools protocol on a
// pipe (--remote-debugging-pipe: JSON messages ending in NUL on file
// descriptors 3 and 4), so a test can type, click, follow redirects and
// measure the layout in one page, which --dump-dom cannot: it dumps the
// first load, and hangs on a navigation under a virtual time budget.
type browser struct {
	t       *testing.T
	cmd     *exec.Cmd
	toChr   io.WriteCloser
	mu      sync.Mutex
	nextID  int
	waiting map[int]chan cdpReply
	session string
	done    chan struct{} // closed when Chromium's output ends
	stderr  bytes.Buffer
}

type cdpReply struct {
	ID     int             `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// cdpTimeout bounds each call: a hung browser fails the test, it does not
// hang it.
const cdpTimeout = 30 * time.Second

// startBrowser starts Chromium with a blank page of width x height CSS
// pixels; t.Cleanup kills it with its whole process group.
func startBrowser(t *testing.T, bin string, width, height int) *browser {
	t.Helper()
	profile := t.TempDir()
	// Chromium reads commands on its fd 3 and writes answers on its fd 4.
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--remote-debugging-pipe", "--user-data-dir="+profile, fmt.Sprintf("--window-size=%d,%d", width, height), "about:blank")
	cmd.Env = append(os.Environ(), "HOME="+profile, "XDG_CONFIG_HOME="+profile, "XDG_CACHE_HOME="+profile)
	cmd.ExtraFiles = []*os.File{cmdR, outW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	b := &browser{t: t, cmd: cmd, toChr: cmdW, waiting: map[int]chan cdpReply{}, done: make(chan struct{})}
	cmd.Stderr = &b.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	_ = cmdR.Close()
	_ = outW.Close()
	go b.read(outR)
	t.Cleanup(func() {
		_ = b.toChr.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		<-b.done
	})

	var target struct{ TargetID string }
	b.call("Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var att struct{ SessionID string }
	b.call("Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att)
	b.session = att.SessionID
	// The exact viewport: a headless window is at least 500 px wide.
	b.call("Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}, nil)
	return b
}

func (b *browser) read(r io.ReadCloser) {
	defer close(b.done)
	defer r.Close()
	br := bufio.NewReader(r)
	for {
		msg, err := br.ReadBytes(0)
		if err != nil {
			return
		}
		var rep cdpReply
		if json.Unmarshal(msg[:len(msg)-1], &rep) != nil || rep.ID == 0 {
			continue // an event
		}
		b.mu.Lock()
		ch := b.waiting[rep.ID]
		delete(b.waiting, rep.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- rep
		}
	}
}

// call sends one command to the page's session (the browser's before
// there is one) and decodes its result into out.
func (b *browser) call(method string, params any, out any) {
	b.t.Helper()
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	ch := make(chan cdpReply, 1)
	b.waiting[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method, "params": params}
	if b.session != "" {
		msg["sessionId"] = b.session
	}
	data, _ := json.Marshal(msg)
	if _, err := b.toChr.Write(append(data, 0)); err != nil {
		b.t.Fatalf("%s: write to chromium: %v; stderr:\n%s", method, err, tail(b.stderr.String()))
	}
	select {
	case rep := <-ch:
		if rep.Error != nil {
			b.t.Fatalf("%s: %s", method, rep.Error.Message)
		}
		if out != nil {
			if err := json.Unmarshal(rep.Result, out); err != nil {
				b.t.Fatalf("%s: %v in %s", method, err, rep.Result)
			}
		}
	case <-b.done:
		b.t.Fatalf("%s: chromium exited; stderr:\n%s", method, tail(b.stderr.String()))
	case <-time.After(cdpTimeout):
		b.t.Fatalf("%s: no answer from chromium in %v", method, cdpTimeout)
	}
}

// eval runs expr in the page (awaiting a promise) and decodes its value.
func (b *browser) eval(expr string, out any) {
	b.t.Helper()
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	b.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &res)
	if res.ExceptionDetails != nil {
		b.t.Fatalf("eval %s: %s %s", expr, res.ExceptionDetails.Text, res.ExceptionDetails.Exception.Description)
	}
	if out != nil && len(res.Result.Value) > 0 {
		if err := json.Unmarshal(res.Result.Value, out); err != nil {
			b.t.Fatalf("eval %s: %v in %s", expr, err, res.Result.Value)
		}
	}
}

// waitUntil polls the boolean expression cond every 100 ms, for up to
// within.
func (b *browser) waitUntil(what, cond string, within time.Duration) {
	b.t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var ok bool
		b.eval("(function(){ try { return !!("+cond+"); } catch (e) { return false; } })()", &ok)
		if ok {
			return
		}
	}
	var text string
	b.eval("document.body ? document.body.innerText : ''", &text)
	b.t.Fatalf("timed out after %v waiting for %s; page text:\n%s", within, what, tail(text))
}

// open loads url and waits for it to be loaded.
func (b *browser) open(url string) {
	b.t.Helper()
	b.call("Page.navigate", map[string]any{"url": url}, nil)
	b.waitUntil("page "+url+" loaded", "document.readyState === 'complete' && location.href !== 'about:blank'", 20*time.Second)
}

// screenshot writes the viewport as a PNG and returns its bytes.
func (b *browser) screenshot(path string) []byte {
	b.t.Helper()
	var res struct{ Data string }
	b.call("Page.captureScreenshot", map[string]any{"format": "png"}, &res)
	png, err := base64.StdEncoding.DecodeString(res.Data)
	if err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o600); err != nil {
		b.t.Fatal(err)
	}
	return png
}
