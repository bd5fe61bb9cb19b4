package dlockadmin_test

import (
	"encoding/json"
	"html"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// The admin view shows a read lock's kind and readers, and who waits in
// line, with owners.
func TestSharedLockShown(t *testing.T) {
	e := setup(t)
	const name = "catalog"
	var readers []dlock.Lock
	for _, owner := range []string{"reader-a", "reader-b"} {
		l, err := newClient(t, e.srv, dlock.WithDefaultOwner(owner)).TryAcquire(bg, name, dlock.WithShared(), dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, l)
	}
	wc := newClient(t, e.srv, dlock.WithDefaultOwner("the-writer"))
	done := make(chan error, 1)
	go func() {
		l, err := wc.Acquire(bg, name, dlock.WithWait(10*time.Second))
		if err == nil {
			err = l.Release(bg)
		}
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := e.c.Inspect(bg, name)
		if err == nil && len(info.Queue) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writer not in line: %+v, %v", info, err)
		}
		time.Sleep(10 * time.Millisecond)
	}

	status, body, _ := e.do(t, "GET", "/api/locks/"+name, nil, nil)
	var one struct {
		Kind    string `json:"kind"`
		Readers []struct {
			Owner string `json:"owner"`
			TTLms int64  `json:"ttl_ms"`
		} `json:"readers"`
		Queue []struct {
			Owner  string `json:"owner"`
			Shared bool   `json:"shared"`
		} `json:"queue"`
	}
	if status != http.StatusOK || json.Unmarshal([]byte(body), &one) != nil {
		t.Fatalf("GET /api/locks/%s: %d %s", name, status, body)
	}
	if one.Kind != "shared" || len(one.Readers) != 2 || one.Readers[0].Owner != "reader-a" || one.Readers[1].Owner != "reader-b" ||
		one.Readers[0].TTLms <= 0 || len(one.Queue) != 1 || one.Queue[0].Owner != "the-writer" || one.Queue[0].Shared {
		t.Fatalf("GET /api/locks/%s: %s", name, body)
	}
	for _, l := range readers {
		if strings.Contains(body, l.Token()) {
			t.Fatalf("a reader's whole token is in %s", body)
		}
	}
	status, body, _ = e.do(t, "GET", "/", nil, nil)
	page := html.UnescapeString(body)
	for _, want := range []string{"read by reader-a", "reader-b", "in line: the-writer (exclusive)"} {
		if status != http.StatusOK || !strings.Contains(page, want) {
			t.Errorf("page (%d) has no %q", status, want)
		}
	}
	for _, l := range readers {
		_ = l.Release(bg)
	}
	if err := <-done; err != nil {
		t.Fatalf("writer after the readers: %v", err)
	}
}
