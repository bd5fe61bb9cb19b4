package redistest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
)

// FlavorEnv names the server the tests start: "redis" (the default, when
// unset) or "valkey". make test runs the suites whose behaviour depends on
// the server (scripts, pub/sub, replication, failover) once with each.
const FlavorEnv = "DLOCK_TEST_SERVER"

// A Flavor is one server's programs and how to install them.
type Flavor struct {
	Name     string // "redis" or "valkey"
	Server   string // the server binary
	Sentinel string // the sentinel binary; else Server --sentinel
	CLI      string // the command-line client (cluster create)
	Install  string // what to run when they are missing
}

var flavors = map[string]Flavor{
	"redis": {Name: "redis", Server: "redis-server", Sentinel: "redis-sentinel", CLI: "redis-cli",
		Install: "apt-get update && apt-get install -y redis-server redis-tools redis-sentinel (or run `make test`, which installs it)"},
	"valkey": {Name: "valkey", Server: "valkey-server", Sentinel: "valkey-sentinel", CLI: "valkey-cli",
		Install: "add bookworm-backports to the Suites line of Debian's source entry (/etc/apt/sources.list.d/debian.sources), then " +
			"apt-get update && apt-get install -y -t bookworm-backports valkey-server (or run `make test`, which installs it)"},
}

var current = sync.OnceValues(func() (Flavor, error) {
	name := os.Getenv(FlavorEnv)
	if name == "" {
		name = "redis"
	}
	f, ok := flavors[name]
	if !ok {
		return Flavor{}, fmt.Errorf("redistest: %s=%q: want redis or valkey", FlavorEnv, name)
	}
	return f, nil
})

// CurrentFlavor is the server FlavorEnv picks.
func CurrentFlavor() (Flavor, error) { return current() }

// missing is the error of a program of f not found on PATH; it matches
// ErrNoRedis.
type missing struct {
	f   Flavor
	bin string
}

func (e missing) Error() string {
	return fmt.Sprintf("redistest: %s not found on PATH (%s=%s); install it: %s", e.bin, FlavorEnv, e.f.Name, e.f.Install)
}

func (missing) Is(target error) bool { return target == ErrNoRedis }

// lookPath finds the program the flavor's field pick names.
func lookPath(pick func(Flavor) string) (string, error) {
	f, err := current()
	if err != nil {
		return "", err
	}
	bin, err := exec.LookPath(pick(f))
	if errors.Is(err, exec.ErrNotFound) {
		return "", missing{f, pick(f)}
	}
	return bin, err
}

// ServerBinary is the flavor's server program, found on PATH.
func ServerBinary() (string, error) { return lookPath(func(f Flavor) string { return f.Server }) }
