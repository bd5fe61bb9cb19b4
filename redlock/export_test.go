package redlock

// Backoff is the pause between busy attempts, for the jitter test.
var Backoff = backoff

// HoldBackDeadline stops l's deadline timer, as a scheduler that does not
// run the timer's goroutine in time holds it back: the end of the validity
// is then found by the next Context call.
func HoldBackDeadline(l *Lock) {
	l.mu.Lock()
	l.life.Disarm()
	l.mu.Unlock()
}
