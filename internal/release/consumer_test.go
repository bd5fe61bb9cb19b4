package release

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// checkEnv is the variable that turns TestConsumer on: it compiles the
// published modules and all their dependencies, a minute of both cores on
// a cold build cache, so `make release-check` runs it on its own rather
// than beside the timing-sensitive tests of `go test ./...`.
const checkEnv = "DLOCK_RELEASE_CHECK"

// cliPath is the CLI's package (and module): users install it with
// `go install cliPath@version` once tagged, from a clone before (cmd/dlock/README.md).
const cliPath = rootPath + "/cmd/dlock"

// consumerMain is a user's program that imports every published package
// and calls something of each, so that the build compiles and links them.
// An API change that breaks it breaks users' programs too: change it with
// the API, and say so in the release notes.
const consumerMain = `package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockgocron"
	"github.com/dlock-go/dlock/dlockgrpc"
	"github.com/dlock-go/dlock/dlockotel"
	"github.com/dlock-go/dlock/dlockprom"
)

func main() {
	// Nothing listens there: no call below reaches Redis.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, err := dlock.New(rdb, dlock.WithObserver(dlockotel.NewObserver()))
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	intercept, err := dlockgrpc.UnaryServerInterceptor(locker, dlockgrpc.Method("rpc:"),
		dlockgrpc.WithAcquireOptions(dlock.WithTTL(10*time.Second)))
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	if _, err := dlockgocron.New(locker, time.Minute, time.Hour); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	observed, err := dlock.New(rdb, dlock.WithObserver(dlockprom.NewCollector()))
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(intercept))
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, l := range []*dlock.Client{locker, observed} {
		if err := l.Close(ctx); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
	}
	fmt.Println("consumer ok")
}
`

// TestConsumer builds a module proxy in a temporary directory holding the
// published modules at the release version, made from the working tree,
// and then, in temporary directories outside the repository, does what
// users do once the tags are pushed:
//
//   - for each published module alone, a module requiring only it builds
//     every package of it, so that its go.mod's requirements (not the
//     replace) decide the versions of the repository's other modules;
//   - `go install` of the CLI at the release version, as its README says,
//     gives a dlock whose --version is that version;
//   - a module requiring all of them builds, vets and runs a program that
//     calls each.
//
// Modules other than the repository's come from the local module cache's
// download directory, else from the machine's GOPROXY; checksums from the
// repository's go.sum files. The go command gets its own module cache, so
// that the made-up release never lands in the user's.
func TestConsumer(t *testing.T) {
	root := repoRoot(t)
	if os.Getenv(checkEnv) == "" {
		t.Skipf("set %s=1 (make release-check) to build a consumer module against the release made from the work tree", checkEnv)
	}
	start := time.Now()
	mods := modules(t, root)
	pub := publishedModules(t, mods)
	v := releaseVersion(t, mods)

	tmp := t.TempDir()
	if _, inside := within(filepath.ToSlash(root), filepath.ToSlash(tmp)); inside {
		t.Fatalf("the temporary directory %s is inside the repository %s: set TMPDIR elsewhere", tmp, root)
	}
	proxy := filepath.Join(tmp, "proxy")
	counts := writeProxy(t, proxy, root, v, mods, pub)
	for _, m := range pub {
		t.Logf("proxy: %s@%s, %d files (tag %s)", m.mod.Module.Path, v, counts[m.dir], tagName(m.dir, v))
	}

	// The go command's environment: ours with these replaced. GOFLAGS
	// -modcacherw lets t.TempDir remove the module cache.
	modcache := strings.TrimSpace(string(goCmd(t, root, nil, time.Minute, "env", "GOMODCACHE")))
	upstream := strings.TrimSpace(string(goCmd(t, root, nil, time.Minute, "env", "GOPROXY")))
	set := map[string]string{
		"GOPROXY":    "file://" + filepath.ToSlash(proxy) + ",file://" + filepath.ToSlash(filepath.Join(modcache, "cache", "download")) + "," + upstream,
		"GOMODCACHE": filepath.Join(tmp, "modcache"),
		"GOFLAGS":    "-mod=mod -modcacherw",
		"GONOSUMDB":  "github.com/dlock-go", // not published: the checksum database has never seen it
		"GOPRIVATE":  "",                    // else GONOPROXY would send our modules past the proxy, to git
		"GONOPROXY":  "",
		"GOWORK":     "off",
	}
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !hasKey(set, k) {
			env = append(env, kv)
		}
	}
	for k, val := range set {
		env = append(env, k+"="+val)
	}

	// go.sum: what the repository's modules already verified.
	var sums []string
	seen := map[string]bool{}
	for _, m := range pub {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(m.dir), "go.sum"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, l := range trimLines(data) {
			if !seen[l] {
				seen[l] = true
				sums = append(sums, l)
			}
		}
	}
	goVersion := pub[0].mod.Go

	consumer := func(name string, req []module, files map[string]string) string {
		dir := filepath.Join(tmp, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		var gomod strings.Builder
		fmt.Fprintf(&gomod, "module example.com/%s\n\ngo %s\n\nrequire (\n", name, goVersion)
		for _, m := range req {
			fmt.Fprintf(&gomod, "\t%s %s\n", m.mod.Module.Path, v)
		}
		gomod.WriteString(")\n")
		files["go.mod"] = gomod.String()
		files["go.sum"] = strings.Join(sums, "\n") + "\n"
		for f, data := range files {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}

	// -trimpath: the compiled packages do not depend on where the module
	// cache is, so a second run finds them in the build cache.
	for _, m := range pub {
		name := "only-root"
		if m.dir != "." {
			name = "only-" + strings.ReplaceAll(m.dir, "/", "-")
		}
		dir := consumer(name, []module{m},
			map[string]string{"doc.go": "// Package consumer requires one published module.\npackage consumer\n"})
		goCmd(t, dir, env, 3*time.Minute, "build", "-trimpath", m.mod.Module.Path+"/...")
		t.Logf("%s@%s alone: every package builds (%v)", m.mod.Module.Path, v, time.Since(start).Round(time.Millisecond))
	}

	// The CLI as its README installs it: `go install ...@version` builds
	// the module as it was published, outside any module, and refuses one
	// whose go.mod has replace directives.
	gobin := filepath.Join(tmp, "bin")
	installEnv := append(append([]string(nil), env...), "GOBIN="+gobin)
	goCmd(t, tmp, installEnv, 3*time.Minute, "install", "-trimpath", cliPath+"@"+v)
	if out := runConsumer(t, filepath.Join(gobin, "dlock"), "--version"); !strings.HasPrefix(out, "dlock "+v+" ") {
		t.Errorf("dlock --version after go install %s@%s: %q, want it to start with %q", cliPath, v, out, "dlock "+v+" ")
	}
	t.Logf("go install %s@%s: dlock --version works (%v)", cliPath, v, time.Since(start).Round(time.Millisecond))

	dir := consumer("all", pub, map[string]string{"main.go": consumerMain})
	goCmd(t, dir, env, 3*time.Minute, "build", "-trimpath", "-o", "consumer", ".")
	goCmd(t, dir, env, 3*time.Minute, "vet", "-trimpath", "./...")
	listArgs := []string{"list", "-m", "-f", "{{.Path}} {{.Version}}{{if .Replace}} => {{.Replace.Path}}{{end}}"}
	for _, m := range pub {
		listArgs = append(listArgs, m.mod.Module.Path)
	}
	list := string(goCmd(t, dir, env, time.Minute, listArgs...))
	for _, m := range pub {
		if want := m.mod.Module.Path + " " + v; !strings.Contains("\n"+list, "\n"+want+"\n") {
			t.Errorf("the consumer's build list has not %q:\n%s", want, list)
		}
	}
	out := runConsumer(t, filepath.Join(dir, "consumer"))
	if strings.TrimSpace(out) != "consumer ok" {
		t.Errorf("the consumer printed %q, want %q", out, "consumer ok")
	}
	t.Logf("a consumer of all of them builds, vets and runs (%v in all)", time.Since(start).Round(time.Millisecond))
}

// hasKey reports whether m has the key k.
func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// runConsumer runs a binary the test built, with args, and returns its
// output, failing the test if it fails or runs for more than 30 seconds.
func runConsumer(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, out)
	}
	return string(out)
}
