// Command dlock runs commands under distributed locks kept in Redis, and
// shows, inspects and breaks those locks. See README.md, or `dlock help`.
package main

import (
	"context"
	"os"

	"github.com/redis/go-redis/v9"
)

func main() {
	// go-redis logs failed dials on its own; dlock reports each error once,
	// with its exit code, so its log would only repeat it.
	redis.SetLogger(quiet{})
	os.Exit(execute(context.Background(), os.Args[1:], osDeps()))
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
