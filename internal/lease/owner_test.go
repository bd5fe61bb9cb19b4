package lease

import (
	"context"
	"slices"
	"testing"
	"time"
)

// After Shut nothing begins and nothing is tracked; Shut hands back what
// was held, and a channel that closes when the last acquisition under way
// ends, the same for every Shut.
func TestOwnerShutStopsNewWorkAndWaitsForAcquisitions(t *testing.T) {
	o := NewOwner[int]()
	if !o.Track(1) || !o.Track(2) {
		t.Fatal("Track refused before Shut")
	}
	o.Untrack(2)
	if !o.Begin() {
		t.Fatal("Begin refused before Shut")
	}
	held, drained := o.Shut()
	_, again := o.Shut()
	if !slices.Equal(held, []int{1}) || drained == nil || drained != again {
		t.Fatalf("Shut: held %v, drained %v and %v; want [1] and one channel", held, drained, again)
	}
	if o.Begin() || o.Track(3) || !o.Closed() {
		t.Fatal("an acquisition began, or a lock was tracked, after Shut")
	}
	select {
	case <-drained:
		t.Fatal("drained closed with an acquisition under way")
	default:
	}
	o.End()
	select {
	case <-drained:
	case <-time.After(2 * time.Second):
		t.Fatal("drained still open after the last acquisition ended")
	}
	Drained(context.Background(), drained)
	Drained(context.Background(), nil)
}

// Background work started before StopBackground is waited for; none starts
// after it.
func TestOwnerWaitBackgroundWaitsForWhatStarted(t *testing.T) {
	o := NewOwner[int]()
	release := make(chan struct{})
	done := make(chan struct{})
	if !o.Go(func() { <-release; close(done) }) {
		t.Fatal("Go refused before StopBackground")
	}
	o.StopBackground()
	if o.Go(func() { t.Error("background work ran after StopBackground") }) {
		t.Fatal("Go accepted after StopBackground")
	}
	waited := make(chan struct{})
	go func() { o.WaitBackground(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("WaitBackground returned with work still running")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-done
	select {
	case <-waited:
	case <-time.After(2 * time.Second):
		t.Fatal("WaitBackground did not return after the work ended")
	}
}
