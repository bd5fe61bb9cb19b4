package dlockgrpc_test

import (
	"os"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// exampleAddr is the redis-server the Example functions use; TestMain starts
// it (an Example has no *testing.T to start one with), and fails the run
// when goroutines outlive the tests.
var exampleAddr string

func TestMain(m *testing.M) { os.Exit(redistest.RunMain(m, &exampleAddr)) }

// startRedis starts a redis-server for one test and stops it in t.Cleanup;
// a missing redis-server fails the test with the install command.
func startRedis(t testing.TB) string { return redistest.Start(t).Addr }
