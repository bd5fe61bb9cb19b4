package dlockadmin_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockadmin"
	"github.com/dlock-go/dlock/internal/redistest"
)

type slowScan struct{ d time.Duration }

func (slowScan) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s slowScan) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "scan" {
			time.Sleep(s.d)
		}
		return next(ctx, cmd)
	}
}
func (slowScan) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// From the review: listings run one at a time, and the wait for the turn
// counted in the request's timeout. Unauthenticated requests with distinct
// filters (no cache hit) queued up; those that timed out in the queue, or
// got the turn with too little of their timeout left, were answered 503
// "Redis did not answer in time" and each wrote an ERROR line, though Redis
// answered every call well in time: anyone could fill the error log and
// make the page report an outage. Now a listing gets its whole timeout from
// its turn on, and a turn not had in time is answered busy, not logged.
func TestQueuedListingsAreNotRedisFailures(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	rdb.AddHook(slowScan{200 * time.Millisecond})
	c := dlock.MustNew(rdb)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	log := &syncBuffer{}
	h := dlockadmin.MustNewHandler(c, dlockadmin.WithTimeout(time.Second),
		dlockadmin.WithLogger(slog.New(slog.NewJSONHandler(log, nil))))
	var wg sync.WaitGroup
	codes := make([]int, 12)
	for i := range codes {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", fmt.Sprintf("/api/locks?match=f%d*", i), nil))
			codes[i] = rec.Code
		})
	}
	wg.Wait()
	busy := 0
	for _, c := range codes {
		if c == 503 {
			busy++
		}
	}
	if busy == 0 {
		t.Errorf("statuses %v: no request waited past its timeout, the queue was not exercised", codes)
	}
	if n := strings.Count(log.String(), `"level":"ERROR"`); n > 0 {
		t.Errorf("statuses %v; %d ERROR lines though every Redis call took 200ms of a 1s timeout:\n%.600s", codes, n, log.String())
	}
}
