package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// The service in one instance: the first order of a user is placed, the
// second is refused by the handler's check, which the lock keeps honest
// when many instances serve the same user.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "orders-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	redisSrv, err := redistest.Launch(ctx, dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer redisSrv.Kill()
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	srv := httptest.NewServer(newHandler(locker, rdb, "example", 0, false))
	defer srv.Close()
	for range 2 {
		resp, err := http.Post(srv.URL+"/orders/alice", "", nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.Status, strings.Contains(string(body), "already"))
	}
	// Output:
	// 201 Created false
	// 409 Conflict true
}
