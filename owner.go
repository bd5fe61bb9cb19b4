package dlock

// WithOwner sets the owner text stored with this one acquisition,
// in place of the Client's (WithDefaultOwner, "hostname/pid" by default): what
// Inspect, List, the CLI and the admin view show as its holder. For several
// parties sharing one Client, such as the candidates of a leader election
// (package election). The empty string keeps the Client's. A waiter's owner
// goes with its place in line, so a lock handed over by a release shows it
// too.
func WithOwner(owner string) AcquireOption {
	return acquireOptionFunc(func(c *acquireConfig) { c.owner = owner })
}

// Owner returns the owner text the Client stores with its locks (WithDefaultOwner;
// "hostname/pid" by default).
func (c *Client) Owner() string { return c.cfg.owner }
