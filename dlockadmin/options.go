package dlockadmin

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock"
)

// Defaults of the handler. Each can be changed with an Option.
const (
	// DefaultTitle heads the HTML page.
	DefaultTitle = "dlock — held locks"
	// DefaultLimit is the most locks one listing returns, and the default of
	// the limit query parameter. Every listed lock costs Redis a few reads
	// and the page a table row: a keyspace with more held locks than this is
	// looked at through the match filter, not scrolled through.
	DefaultLimit = 1000
	// DefaultTimeout bounds the Redis work of one request. A listing walks
	// the keyspace with SCAN, which on a big keyspace takes a while; an
	// operator who waits longer than this is better served by a narrower
	// match pattern.
	DefaultTimeout = 10 * time.Second
	// TopN is the length of the "hottest" and "longest" rankings.
	TopN = 10
	// MinAdminTokenLength is the shortest admin token WithForceUnlock
	// takes, in bytes.
	MinAdminTokenLength = 16
	// DefaultReadOnlyHint is how a read-only view says force unlock is
	// enabled, by default: see WithReadOnlyHint.
	DefaultReadOnlyHint = "enable it with dlockadmin.WithForceUnlock"
)

// An Option configures the handler made by NewHandler or NewServeMux.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	title      string
	limit      int
	timeout    time.Duration
	adminToken []byte // nil: force unlock is disabled
	enableHint string // how to enable force unlock, for a read-only view
	log        *slog.Logger
	err        error // the first invalid option

	listing listingConfig // cache.go
}

// fail records the first invalid option, for NewHandler to return.
func (c *config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

func defaultConfig() config {
	return config{title: DefaultTitle, limit: DefaultLimit, timeout: DefaultTimeout, enableHint: DefaultReadOnlyHint,
		listing: listingConfig{cacheTTL: DefaultCacheTTL, scanMaxKeys: DefaultScanMaxKeys}}
}

// WithTitle sets the heading and <title> of the HTML page (default
// DefaultTitle), for telling the admin views of several deployments apart.
func WithTitle(title string) Option {
	return optionFunc(func(c *config) {
		if title != "" {
			c.title = title
		}
	})
}

// WithLimit sets the most locks one listing returns (default DefaultLimit);
// a request may ask for fewer with ?limit=N but never more. n must be
// positive (NewHandler refuses others): an unbounded listing of a big
// keyspace is a denial of service.
func WithLimit(n int) Option {
	return optionFunc(func(c *config) {
		if n <= 0 {
			c.fail(fmt.Errorf("dlockadmin: WithLimit(%d): the limit must be positive", n))
			return
		}
		c.limit = n
	})
}

// WithTimeout bounds the Redis work of each request (default
// DefaultTimeout). d must be positive (NewHandler refuses others).
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.fail(fmt.Errorf("dlockadmin: WithTimeout(%v): the timeout must be positive", d))
			return
		}
		c.timeout = d
	})
}

// WithForceUnlock enables force unlock, guarded by adminToken: a request
// must present it (Authorization: Bearer for the API, a password field on
// the HTML page). Without this option, or with an empty token, the handler
// is read-only and refuses every unlock with 403 Forbidden.
//
// Use a long random secret (32 random bytes, hex- or base64-encoded): it is
// the only thing between anyone who can reach the handler and breaking
// every lock's mutual exclusion. A token shorter than MinAdminTokenLength
// bytes is refused (NewHandler returns an error matching
// dlock.ErrInvalidOption): "x" could be guessed despite the limit on
// wrong attempts. Serve the handler on loopback, or behind TLS, since the
// token travels with each unlock request.
func WithForceUnlock(adminToken string) Option {
	return optionFunc(func(c *config) {
		if adminToken == "" {
			c.adminToken = nil
			return
		}
		if len(adminToken) < MinAdminTokenLength {
			// Its length only: an error may end up in a log.
			c.fail(fmt.Errorf("dlockadmin: WithForceUnlock: the admin token is %d bytes long, want at least %d "+
				"(32 random bytes, hex-encoded, say: openssl rand -hex 32): %w", len(adminToken), MinAdminTokenLength, dlock.ErrInvalidOption))
			return
		}
		c.adminToken = []byte(adminToken)
	})
}

// WithLogger sets the logger of the audit trail (default slog.Default()):
// one line per force-unlock attempt, refused or done, with who asked (the
// remote address), the lock, the owner and fence removed, and the result.
// The full token of a lock is never logged. A nil logger keeps the default:
// force unlocks are not meant to happen unrecorded.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l != nil {
			c.log = l
		}
	})
}

// WithReadOnlyHint sets how a read-only view tells the operator to enable
// force unlock, on the page and in the 403 answers to unlocks (default
// DefaultReadOnlyHint, which speaks to the program's author). A program
// that reads the admin token from its environment names the variable
// here, as `dlock serve` does: "set DLOCK_ADMIN_TOKEN and restart dlock
// serve". An empty hint keeps the default.
func WithReadOnlyHint(hint string) Option {
	return optionFunc(func(c *config) {
		if hint != "" {
			c.enableHint = hint
		}
	})
}
