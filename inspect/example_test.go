package inspect_test

import (
	"fmt"
	"time"

	"github.com/dlock-go/dlock/inspect"
)

// An operator's tool shows a lock's holder, its age on the server's clock
// and a token prefix: enough to tell two acquisitions apart, too little to
// release the lock with.
func ExampleLockInfo() {
	now := time.Date(2026, 12, 2, 12, 0, 30, 0, time.UTC)
	info := inspect.LockInfo{Name: "order:42", Owner: "billing-7", Token: "3f9c2a71d4e8b605",
		Fence: 1796236686416054, Since: now.Add(-30 * time.Second), TTL: 7 * time.Second}
	fmt.Printf("%s held by %s for %v (token %s…, fence %d, %v left)\n",
		info.Name, info.Owner, info.Age(now), info.TokenPrefix(), info.Fence, info.TTL)
	// Output:
	// order:42 held by billing-7 for 30s (token 3f9c2a71…, fence 1796236686416054, 7s left)
}
