package torture

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// TestUnplannedSentinelFailoverLogged: a failover the nemesis did not make
// (here SENTINEL FAILOVER from the test, mid-run, with the nemesis idle) is
// logged as FaultFailoverUnplanned, its window around the switch, so that
// the checker can excuse what the promotion lost. make torture's
// sentinel-failover row once failed on such a switch: two holders, no fault
// logged near them.
func TestUnplannedSentinelFailoverLogged(t *testing.T) {
	st := redistest.StartSentinel(t, redistest.WithReplicas(2))
	sc := FailoverScenarios(6 * time.Second)[0]
	sc.Faults = nil
	seed := uint64(time.Now().UnixNano())
	env := testEnv(t, seed)
	env.Sentinel = st
	type switched struct {
		from, to   string
		began, end int64
		err        error
	}
	done := make(chan switched, 1)
	go func() {
		time.Sleep(2 * time.Second)
		var s switched
		s.from, s.began = st.CurrentPrimary(context.Background()), Now()
		s.to, s.err = st.Failover(context.Background())
		s.end = Now()
		done <- s
	}()
	h, err := Run(context.Background(), env, sc)
	if err != nil {
		t.Fatal(err)
	}
	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	var got []Fault
	for _, f := range h.Faults {
		if f.Kind == FaultFailoverUnplanned {
			got = append(got, f)
		}
	}
	// The sentinels may switch again on their own (make torture sees it):
	// the one that names both servers is the test's.
	i := slices.IndexFunc(got, func(f Fault) bool { return strings.Contains(f.Note, s.from+" replaced by "+s.to) })
	if i < 0 {
		t.Fatalf("SENTINEL FAILOVER %s → %s: not among the unplanned failovers logged %v (all faults: %v)", s.from, s.to, got, h.Faults)
	}
	f := got[i]
	t.Logf("switch %s → %s, SENTINEL FAILOVER [%.0fms, %.0fms]; logged [%.0fms, %.0fms]: %s",
		s.from, s.to, float64(s.began-h.Start)/1e6, float64(s.end-h.Start)/1e6, float64(f.From-h.Start)/1e6, float64(f.To-h.Start)/1e6, f.Note)
	// From is the last look (every 50 ms) that saw the old primary agreed
	// on: at most a look or so before SENTINEL FAILOVER was sent.
	if f.From < s.began-int64(200*time.Millisecond) || f.From > s.end || f.To < f.From {
		t.Errorf("window [%d, %d] does not open inside the failover [%d, %d]", f.From, f.To, s.began, s.end)
	}
	v := Check(h)
	t.Logf("seed %d: %s", seed, v.Summary())
	for _, x := range v.Violations {
		t.Error(x)
	}
}
