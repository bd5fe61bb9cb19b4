package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/dlock-go/dlock/internal/redistest"
)

func TestServeListsLocksAndMetrics(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	holder := hold(t, srv, rdb, "served-lock")
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	serve := startDlock(t, srv, "serve", "--listen", "127.0.0.1:"+strconv.Itoa(port))
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	waitFor(t, "serve answering", func() bool { code, _ := get("/healthz"); return code == http.StatusOK })

	code, body := get("/api/locks")
	var list struct {
		Locks []struct {
			Name, Owner string
			Fence       int64
		}
	}
	if err := json.Unmarshal([]byte(body), &list); code != http.StatusOK || err != nil {
		t.Fatalf("GET /api/locks: %d %v\n%s", code, err, body)
	}
	if len(list.Locks) != 1 || list.Locks[0].Name != "served-lock" || list.Locks[0].Fence <= 0 {
		t.Fatalf("locks = %+v", list.Locks)
	}

	code, body = get("/metrics")
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if code != http.StatusOK || err != nil {
		t.Fatalf("GET /metrics: %d %v", code, err)
	}
	// The fleet: the lock the other process holds, read from Redis.
	held := families["dlock_fleet_locks"]
	if held == nil || len(held.Metric) != 1 || held.Metric[0].GetGauge().GetValue() != 1 ||
		held.Metric[0].GetLabel()[0].GetValue() != "served-lock" {
		t.Fatalf("dlock_fleet_locks = %v, want 1 for group served-lock", held)
	}
	if families["dlock_acquire_total"] == nil {
		t.Fatal("no dlock_acquire_total in /metrics")
	}

	// Read-only without the admin token.
	resp, err := http.Post(base+"/api/locks/served-lock/unlock?fence=1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("unlock without an admin token: %d, want 403", resp.StatusCode)
	}

	_ = serve.cmd.Process.Signal(syscall.SIGTERM)
	if code := serve.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM", code)
	}
	_ = holder.cmd.Process.Signal(syscall.SIGTERM)
	holder.wait(t, 10*time.Second)
}
