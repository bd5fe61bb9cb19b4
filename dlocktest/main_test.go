package dlocktest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The double starts no goroutines of its own, and the conformance suite
// ends every one it starts: any left over is a bug.
func TestMain(m *testing.M) {
	if brokenVariant() != "" {
		// A helper process of TestConformanceCatchesBrokenLockers: it
		// fails on purpose, and may leave waiters behind when it does.
		m.Run()
		return
	}
	goleak.VerifyTestMain(m)
}
