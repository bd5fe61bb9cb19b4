package release

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pretagMain is a user's first program, as the README's "Use it" writes it.
const pretagMain = `package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

func main() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, err := dlock.New(rdb)
	if err != nil {
		fmt.Println("bad options:", err)
		return
	}
	defer locker.Close(ctx)
	lock, err := locker.TryAcquire(ctx, "order:42", dlock.WithTTL(10*time.Second))
	if errors.Is(err, dlock.ErrNotObtained) {
		fmt.Println("someone else is processing order 42")
		return
	}
	if err != nil {
		fmt.Println("redis trouble:", err)
		return
	}
	defer lock.Release(ctx)
	fmt.Println("processing", lock.Name(), lock.Fence())
}
`

// TestInstallBeforeTag does what the README's Install says to do while
// nothing is tagged: a module of the user's own, outside the repository,
// points at a clone with a replace in its own go.mod, `go get`s dlock, and
// builds and vets a program. The modules come from the local module cache
// only (GOPROXY=off), which the repository's other checks have filled, and
// their checksums from the repository's go.sum.
func TestInstallBeforeTag(t *testing.T) {
	root := repoRoot(t)
	if os.Getenv(checkEnv) == "" {
		t.Skipf("set %s=1 (make release-check) to build a user's module against the clone, as the README's Install says", checkEnv)
	}
	app := t.TempDir()
	if _, inside := within(filepath.ToSlash(root), filepath.ToSlash(app)); inside {
		t.Fatalf("the temporary directory %s is inside the repository %s: set TMPDIR elsewhere", app, root)
	}
	if err := os.WriteFile(filepath.Join(app, "main.go"), []byte(pretagMain), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off")
	steps := [][]string{
		{"mod", "init", "example.com/app"},
		{"mod", "edit", "-replace", "github.com/dlock-go/dlock=" + root},
		{"get", "github.com/dlock-go/dlock"},
		{"mod", "tidy"},
		{"build", "-o", filepath.Join(app, "app"), "."},
		{"vet", "."},
	}
	start := time.Now()
	for i, args := range steps {
		goCmd(t, app, env, 3*time.Minute, args...)
		if i == 0 {
			// The checksums a user's go command would get from the
			// checksum database (offline here): the repository's own.
			sums, err := os.ReadFile(filepath.Join(root, "go.sum"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(app, "go.sum"), sums, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	mod, err := os.ReadFile(filepath.Join(app, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mod), "replace github.com/dlock-go/dlock => "+root) {
		t.Fatalf("go.mod has no replace to the clone:\n%s", mod)
	}
	t.Logf("a user's module built against the clone in %v", time.Since(start).Round(time.Millisecond))
}
