package dlockadmin_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockadmin"
)

// An operator's view of the held locks: mount the handler, read-only unless
// WithForceUnlock gives it an admin token.
func ExampleNewHandler() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb, dlock.WithDefaultOwner("billing-worker-1"))
	defer locker.Close(bg)

	lock, err := locker.Acquire(bg, "invoice:2024-11", dlock.WithTTL(30*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Release(bg)

	admin := dlockadmin.MustNewHandler(locker)

	rec := httptest.NewRecorder()
	admin.ServeHTTP(rec, httptest.NewRequest("GET", "/api/locks?match=invoice:*", nil))
	var list struct {
		Locks []struct {
			Name        string `json:"name"`
			Owner       string `json:"owner"`
			TokenPrefix string `json:"token_prefix"`
			LeaseMs     int64  `json:"lease_ms"`
		} `json:"locks"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &list)
	for _, l := range list.Locks {
		fmt.Printf("%s held by %s, lease %dms, token %d chars shown\n", l.Name, l.Owner, l.LeaseMs, len(l.TokenPrefix))
	}

	// Read-only: force unlock is refused.
	rec = httptest.NewRecorder()
	admin.ServeHTTP(rec, httptest.NewRequest("POST", "/api/locks/invoice:2024-11/unlock?fence=1", nil))
	fmt.Println("force unlock:", rec.Code)
	// Output:
	// invoice:2024-11 held by billing-worker-1, lease 30000ms, token 8 chars shown
	// force unlock: 403
}

// The mux of an admin server: the view at /, metrics at /metrics, and
// /healthz, /readyz for the orchestrator.
func ExampleNewServeMux() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(bg)

	metrics := http.NotFoundHandler() // a Prometheus handler, say
	mux, err := dlockadmin.NewServeMux(locker, metrics, dlockadmin.WithTitle("Staging locks"))
	if err != nil {
		fmt.Println(err)
		return
	}
	// In a program: http.ListenAndServe("127.0.0.1:9090", mux)

	for _, path := range []string{"/healthz", "/readyz"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		fmt.Print(path, " ", rec.Code, " ", rec.Body.String())
	}
	// Output:
	// /healthz 200 ok
	// /readyz 200 ready
}

// One shape for a lock in JSON: the API answers with Lock, `dlock list -o
// json` prints it, and LockOf makes one from a inspect.LockInfo.
func ExampleLockOf() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb, dlock.WithDefaultOwner("cron@host-1"))
	defer locker.Close(bg)
	lock, err := locker.Acquire(bg, "report:daily", dlock.WithTTL(30*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Release(bg)

	info, err := locker.Inspect(bg, "report:daily")
	if err != nil {
		fmt.Println(err)
		return
	}
	mine := dlockadmin.LockOf(info, time.Now())

	rec := httptest.NewRecorder()
	dlockadmin.MustNewHandler(locker).ServeHTTP(rec, httptest.NewRequest("GET", "/api/locks/report:daily", nil))
	var api dlockadmin.Lock
	_ = json.Unmarshal(rec.Body.Bytes(), &api)

	fmt.Println(mine.Name, mine.Kind, mine.Owner, mine.LeaseMS, len(mine.TokenPrefix))
	fmt.Println(api.Name, api.Kind, api.Owner, api.LeaseMS, len(api.TokenPrefix), api.Fence == mine.Fence)
	// Output:
	// report:daily exclusive cron@host-1 30000 8
	// report:daily exclusive cron@host-1 30000 8 true
}

// A read-only view tells the operator how to enable force unlock in the
// program's own terms, here the environment variable it reads the token
// from.
func ExampleWithReadOnlyHint() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(bg)

	opts := []dlockadmin.Option{dlockadmin.WithReadOnlyHint("set ADMIN_TOKEN and restart the service")}
	if tok := ""; tok != "" { // os.Getenv("ADMIN_TOKEN") in a program
		opts = append(opts, dlockadmin.WithForceUnlock(tok))
	}
	admin := dlockadmin.MustNewHandler(locker, opts...)

	rec := httptest.NewRecorder()
	admin.ServeHTTP(rec, httptest.NewRequest("POST", "/api/locks/report/unlock?fence=1", nil))
	var answer struct{ Error string }
	_ = json.Unmarshal(rec.Body.Bytes(), &answer)
	fmt.Println(rec.Code, answer.Error)
	// Output:
	// 403 force unlock is disabled: this admin view is read-only (set ADMIN_TOKEN and restart the service)
}

// One listing walks at most the scan budget's keys of the keyspace, other
// data included; a keyspace larger than that is listed in part, and the
// listing says so.
func ExampleWithScanBudget() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(bg)
	// Data of another application, in the same Redis.
	pipe := rdb.Pipeline()
	for i := range 3000 {
		pipe.Set(bg, fmt.Sprintf("example-budget:%d", i), "x", time.Minute)
	}
	if _, err := pipe.Exec(bg); err != nil {
		fmt.Println(err)
		return
	}

	admin := dlockadmin.MustNewHandler(locker, dlockadmin.WithScanBudget(1000))
	var list struct {
		Truncated     bool `json:"truncated"`
		ScanTruncated bool `json:"scan_truncated"`
		KeysExamined  int  `json:"keys_examined"`
	}
	rec := httptest.NewRecorder()
	admin.ServeHTTP(rec, httptest.NewRequest("GET", "/api/locks", nil))
	_ = json.Unmarshal(rec.Body.Bytes(), &list)
	fmt.Println("truncated:", list.Truncated, "by the budget:", list.ScanTruncated, "within it:", list.KeysExamined <= 1000)
	// Output:
	// truncated: true by the budget: true within it: true
}

// Requests for the same listing within the cache period are answered from
// one walk of the keyspace: generated_at tells how old it is. A force
// unlock through the handler clears the cache.
func ExampleWithCacheTTL() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(bg)
	admin := dlockadmin.MustNewHandler(locker, dlockadmin.WithCacheTTL(5*time.Second))

	generated := func() time.Time {
		var list struct {
			GeneratedAt time.Time `json:"generated_at"`
		}
		rec := httptest.NewRecorder()
		admin.ServeHTTP(rec, httptest.NewRequest("GET", "/api/locks?match=report:*", nil))
		_ = json.Unmarshal(rec.Body.Bytes(), &list)
		return list.GeneratedAt
	}
	first := generated()
	fmt.Println("same listing:", generated().Equal(first))
	// Output:
	// same listing: true
}
