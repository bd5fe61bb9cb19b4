package dlockadmin_test

import (
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockadmin"
)

// An admin token someone could guess is refused when the handler is made,
// before anything serves.
func ExampleWithForceUnlock() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(bg)

	_, err := dlockadmin.NewHandler(locker, dlockadmin.WithForceUnlock("letmein"))
	fmt.Println(errors.Is(err, dlock.ErrInvalidOption))
	fmt.Println(err)
	// Output:
	// true
	// dlockadmin: WithForceUnlock: the admin token is 7 bytes long, want at least 16 (32 random bytes, hex-encoded, say: openssl rand -hex 32): dlock: invalid option
}
