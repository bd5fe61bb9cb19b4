package torture

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// TODO: re-enable once workerMain (the worker processes) is in this tree:
	// if os.Getenv("DLOCK_TORTURE_WORKER") != "" {
	// 	os.Exit(workerMain())
	// }
	goleak.VerifyTestMain(m)
}
