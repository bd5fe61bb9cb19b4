// Command dlock runs commands under distributed locks kept in Redis, and
// shows, inspects and breaks those locks. See README.md, or `dlock help`.
package main

import (
	"context"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/torture"
)

func main() {
	// go-redis logs failed dials on its own; dlock reports each error once,
	// with its exit code, so its log would only repeat it. Set before the
	// worker check: torture's workers, cut off by their faults on purpose,
	// would fill the terminal of `dlock torture` with it.
	redis.SetLogger(quiet{})
	// `dlock torture` runs its workers as this binary again, told so by
	// the environment: they never reach the command line.
	if torture.IsWorker() {
		os.Exit(torture.WorkerMain())
	}
	os.Exit(execute(context.Background(), os.Args[1:], osDeps()))
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
