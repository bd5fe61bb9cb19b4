package dlockadmin_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockadmin"
)

// A semaphore shows its permits and waiters in the API and on the page,
// and a permit is force-unlocked by its own fence.
func TestSemaphoreView(t *testing.T) {
	e := setup(t, dlockadmin.WithForceUnlock(adminSecret))
	var held []dlock.Lock
	for _, owner := range []string{"enc-1", "enc-2"} {
		c := newClient(t, e.srv, dlock.WithDefaultOwner(owner))
		l, err := c.TryAcquire(bg, "enc", dlock.WithPermits(2), dlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	w := newClient(t, e.srv, dlock.WithDefaultOwner("enc-3"))
	got := make(chan dlock.Lock, 1)
	go func() {
		l, _ := w.Acquire(bg, "enc", dlock.WithPermits(2), dlock.WithWait(10*time.Second))
		got <- l
	}()
	var view struct {
		Kind    string `json:"kind"`
		Permits int    `json:"permits"`
		Holders []struct {
			Owner string `json:"owner"`
			Fence int64  `json:"fence"`
		} `json:"holders"`
		Queue []struct {
			Owner string `json:"owner"`
		} `json:"queue"`
	}
	for deadline := time.Now().Add(5 * time.Second); len(view.Queue) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never showed")
		}
		_, body, _ := e.do(t, "GET", "/api/locks/enc", nil, nil)
		if err := json.Unmarshal([]byte(body), &view); err != nil {
			t.Fatalf("%v in %s", err, body)
		}
	}
	if view.Kind != "semaphore" || view.Permits != 2 || len(view.Holders) != 2 || view.Queue[0].Owner != "enc-3" {
		t.Fatalf("view = %+v", view)
	}
	if _, body, _ := e.do(t, "GET", "/", nil, nil); !strings.Contains(body, "2/2 permits") || !strings.Contains(body, "enc-3") {
		t.Fatalf("page lacks the permits or the waiter")
	}
	// Unlock enc-1's permit by its fence: the waiter gets it.
	fence := strconv.FormatInt(held[0].Fence(), 10)
	if status, body := e.unlock(t, "enc", fence, bearerHeader(adminSecret)); status != http.StatusOK {
		t.Fatalf("unlock of a permit by its fence: %d %s", status, body)
	}
	l := <-got
	if l == nil {
		t.Fatal("the waiter did not get the freed permit")
	}
	if _, err := held[1].TTL(bg); err != nil {
		t.Fatalf("the other permit was touched: %v", err)
	}
	_ = l.Release(bg)
	_ = held[1].Release(bg)
}
