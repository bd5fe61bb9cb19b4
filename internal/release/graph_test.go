package release

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cliOnly are module path prefixes that the CLI (cmd/dlock) and the
// Prometheus collector (dlockprom) need and the library does not: they live
// in those nested modules so that a program importing only
// github.com/dlock-go/dlock does not get them in its module graph, nor
// have its own versions of them raised by dlock's go.mod.
var cliOnly = []string{
	"github.com/spf13/cobra",
	"github.com/spf13/pflag",
	"github.com/inconshreveable/mousetrap",
	"github.com/prometheus/",
	"golang.org/x/term",
	"google.golang.org/protobuf",
}

// TestLibraryGraph: the module graph of a user's module that requires only
// the root module (through a replace to the work tree, as the root's go.mod
// is what users get) holds none of the CLI's or the collector's
// dependencies. `go list -m all` is the build list the go command computes
// from the go.mod files, the same that pins the user's versions.
func TestLibraryGraph(t *testing.T) {
	root := repoRoot(t)
	dir := t.TempDir()
	if _, inside := within(filepath.ToSlash(root), filepath.ToSlash(dir)); inside {
		t.Fatalf("the temporary directory %s is inside the repository %s: set TMPDIR elsewhere", dir, root)
	}
	mods := modules(t, root)
	gomod := "module example.com/library\n\ngo " + mods[0].mod.Go + "\n\n" +
		"require " + rootPath + " v0.0.0-00010101000000-000000000000\n\n" +
		"replace " + rootPath + " => " + filepath.ToSlash(root) + "\n"
	sums, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"go.mod": []byte(gomod),
		"go.sum": sums, // the root's checksums: no lookup for what it already verified
		"main.go": []byte("package main\n\nimport \"github.com/dlock-go/dlock\"\n\n" +
			"func main() { _ = dlock.ErrNotObtained }\n"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	list := trimLines(goCmd(t, dir, env, 2*time.Minute, "list", "-m", "-f", "{{.Path}}", "all"))
	for _, m := range list {
		for _, p := range cliOnly {
			if m == p || strings.HasSuffix(p, "/") && strings.HasPrefix(m, p) {
				t.Errorf("a module importing only %s has %s in its module graph: a dependency of the CLI or of "+
					"dlockprom has reached the root module's go.mod", rootPath, m)
			}
		}
	}
	t.Logf("`go list -m all` of a module importing only %s: %d modules:\n%s", rootPath, len(list), strings.Join(list, "\n"))
}
