package dlock

import "github.com/dlock-go/dlock/internal/node"

// WithShared makes the acquisition a read lock on the name: any number of
// shared holders at once, none while an exclusive holder (an acquisition
// without WithShared) has it; like flock -s beside flock -x on one file.
//
// A shared Lock is a Lock like any other: its own token and lease, renewed
// by the client's one renewal loop, its context ended when it is lost, and
// Release hands the name on when the last reader leaves.
//
// Writers go first: a reader does not join a name that readers hold while a
// live writer waits in line ahead of it, so a steady stream of readers
// cannot keep a writer out for ever. WithoutWriterPriority lifts that rule.
// When the writer (or the last reader) lets go, the first live waiter gets
// the name; if that is a reader, so does every live reader behind it up to
// the next writer, in the same step.
//
// Fence() of a reader is its own grant's fence: it grows with every
// acquisition of the name like a writer's, but readers hold the name
// together, so a reader's fence orders it against writers, not against the
// other readers.
func WithShared() AcquireOption {
	return acquireOptionFunc(func(c *acquireConfig) { c.shared = true })
}

// WithoutWriterPriority lets a reader (with WithShared) join readers that hold the
// name even while writers wait in line: reads are never held up by a writer
// that waits. The cost is that writers can starve: as long as readers keep
// overlapping, the name never becomes free and a waiting writer waits until
// its wait limit. Use it only where reads are short and sparse, or where a
// late write is acceptable. Without WithShared it is refused with
// ErrInvalidOption.
func WithoutWriterPriority() AcquireOption {
	return acquireOptionFunc(func(c *acquireConfig) { c.skipWriters = true })
}

// newToken returns a fresh token for one acquisition. A reader's carries
// node's shared prefix: the scripts a token runs (acquire, refresh, release,
// ttl) are chosen by it, so the waiting, renewal and release machinery is
// the same for both kinds.
// A permit's (WithPermits) carries the semaphore's prefix the same way.
func (ac acquireConfig) newToken() string {
	switch {
	case ac.shared:
		return node.SharedPrefix + newToken()
	case ac.semaphore:
		return node.SemPrefix + newToken()
	}
	return newToken()
}
