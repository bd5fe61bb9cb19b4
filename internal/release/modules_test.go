package release

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// rootPath is the root module's path; every module of the repository lives
// under it.
const rootPath = "github.com/dlock-go/dlock"

// published are the directories (relative to the repository root, "." for
// the root) of the modules users fetch: each is tagged at every release
// (docs/RELEASING.md), and TestConsumer builds each of them from the proxy.
var published = []string{".", "cmd/dlock", "dlockgocron", "dlockgrpc", "dlockotel", "dlockprom"}

// unpublished are the modules that are never tagged, with the reason.
var unpublished = map[string]string{
	"dlockprom/monitoring": "the test of the example alert rules and Grafana dashboard beside it (users copy the two " +
		"files); a module of its own so that github.com/prometheus/prometheus, which parses the rules, is not a " +
		"dependency of dlockprom's users",
	"bench": "a measuring tool run in the repository (make bench); it keeps the zero pseudo-version " +
		"of dlock so that it can only be built through its replace, against the working tree it measures",
	"examples/dbtx": "a runnable example (locks and database transactions) whose database drivers stay out of " +
		"the root module; like bench it keeps the zero pseudo-version of dlock and builds only through its replace",
}

// goMod is what `go mod edit -json` prints of a go.mod.
type goMod struct {
	Module  struct{ Path string }
	Go      string
	Require []struct {
		Path     string
		Version  string
		Indirect bool
	}
	Replace []replace
	Exclude []struct{ Path, Version string }
}

// replace is a replace directive of a go.mod or go.work, as `go mod edit
// -json` and `go work edit -json` print it.
type replace struct {
	Old struct{ Path, Version string }
	New struct{ Path, Version string }
}

// module is one go.mod of the repository.
type module struct {
	dir string // relative to the repository root, slash-separated; "." for the root
	mod goMod
}

// semverRE matches a semantic version as Go modules write it (no build
// metadata); pseudoRE matches the pseudo-versions among them, which name a
// commit and are served only for a commit a proxy can fetch (the
// expression of golang.org/x/mod/module.IsPseudoVersion).
var (
	semverRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)
	pseudoRE = regexp.MustCompile(`^v[0-9]+\.(0\.0-|\d+\.\d+-([^+]*\.)?0\.)\d{14}-[A-Za-z0-9]+(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)
)

// isRelease reports whether v is a version a tag can make: semantic, not a
// pseudo-version.
func isRelease(v string) bool { return semverRE.MatchString(v) && !pseudoRE.MatchString(v) }

// repoRoot returns the repository's root directory (the root module's),
// skipping the test when this is not a git work tree of the repository:
// from a module cache (`go test all` in a user's module) there are no
// nested modules and no git to read the files from.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			regexp.MustCompile(`(?m)^module\s+`+regexp.QuoteMeta(rootPath)+`\s*$`).Match(data) {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod of module %s above the test's directory", rootPath)
		}
		dir = parent
	}
	if _, err := os.Stat(filepath.Join(dir, ".git")); err != nil {
		t.Skipf("%s is not a git work tree of the repository (a module cache?): nothing to check", dir)
	}
	return dir
}

// goCmd runs the go command in dir with env (nil: the test's environment)
// and returns its combined output, failing the test with that output if it
// fails or takes longer than timeout.
func goCmd(t *testing.T, dir string, env []string, timeout time.Duration, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		t.Fatalf("in %s: go %s: %v\n%s", dir, strings.Join(args, " "), err, out)
	}
	return out
}

// modules returns every go.mod of the repository, found the way the
// Makefile's MODULES finds them (everywhere but .git), sorted by directory.
func modules(t *testing.T, root string) []module {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" {
			rel, err := filepath.Rel(root, filepath.Dir(p))
			if err != nil {
				return err
			}
			dirs = append(dirs, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(dirs)
	mods := make([]module, 0, len(dirs))
	for _, dir := range dirs {
		m := module{dir: dir}
		out := goCmd(t, filepath.Join(root, filepath.FromSlash(dir)), nil, time.Minute, "mod", "edit", "-json")
		if err := json.Unmarshal(out, &m.mod); err != nil {
			t.Fatalf("%s/go.mod: go mod edit -json: %v", dir, err)
		}
		mods = append(mods, m)
	}
	return mods
}

// publishedModules returns the published modules, the root first.
func publishedModules(t *testing.T, mods []module) []module {
	t.Helper()
	var out []module
	for _, dir := range published {
		found := false
		for _, m := range mods {
			if m.dir == dir {
				out = append(out, m)
				found = true
			}
		}
		if !found {
			t.Fatalf("published module %s has no go.mod: update the list published in this test and docs/RELEASING.md", dir)
		}
	}
	return out
}

// TestModuleSet: every go.mod is either published, at the module path its
// directory gives, or listed as unpublished with a reason, so that a new
// module is not left out of the releases (or tagged by mistake) unnoticed.
func TestModuleSet(t *testing.T) {
	root := repoRoot(t)
	mods := modules(t, root)
	for dir := range unpublished {
		found := false
		for _, m := range mods {
			found = found || m.dir == dir
		}
		if !found {
			t.Errorf("unpublished module %s has no go.mod: take it out of the list unpublished", dir)
		}
	}
	for _, m := range mods {
		if reason, ok := unpublished[m.dir]; ok {
			t.Logf("%s: unpublished: %s", m.dir, reason)
			continue
		}
		isPublished := false
		for _, dir := range published {
			isPublished = isPublished || dir == m.dir
		}
		if !isPublished {
			t.Errorf("%s/go.mod: a module neither published nor unpublished: add its directory to one of the two lists "+
				"in internal/release/modules_test.go (published ones also to the consumer in consumer_test.go and to docs/RELEASING.md)", m.dir)
			continue
		}
		if want := path.Join(rootPath, m.dir); m.mod.Module.Path != want {
			t.Errorf("%s/go.mod: module %s; a published module's path must be %s, for its tags (%s) to name it",
				m.dir, m.mod.Module.Path, want, tagName(m.dir, "vX.Y.Z"))
		}
	}
}

// TestNestedRequires: a published nested module requires the repository's
// modules at one released version, the version the release tags, and keeps
// a replace of each to its directory for development in the repository.
// Users ignore the replace, so a pseudo-version there (such as the zero one
// that `go mod tidy` writes for a replaced module that has no version) would
// make the module unbuildable for them. A module users install with `go
// install ...@version` (one with a main package, see TestInstallable) may
// have no replace in its go.mod: its replaces are in a go.work beside it.
func TestNestedRequires(t *testing.T) {
	root := repoRoot(t)
	mods := modules(t, root)
	pub := publishedModules(t, mods)
	mains := mainPackages(t, root, pub)
	dirOf := map[string]string{} // module path -> directory, every module of the repository
	for _, m := range mods {
		dirOf[m.mod.Module.Path] = m.dir
	}
	versions := map[string][]string{} // version -> "module requires path"
	for _, m := range pub[1:] {
		replaces, where := m.mod.Replace, m.dir+"/go.mod"
		if len(mains[m.dir]) > 0 {
			replaces, where = workReplaces(t, root, m.dir), m.dir+"/go.work"
		}
		for _, r := range m.mod.Require {
			dir, inRepo := dirOf[r.Path]
			if !inRepo {
				continue
			}
			if _, ok := unpublished[dir]; ok {
				t.Errorf("%s/go.mod requires %s, which is never published", m.dir, r.Path)
			}
			if !isRelease(r.Version) {
				t.Errorf("%s/go.mod requires %s %s: users ignore the replace, so this must be a released version "+
					"(the one being tagged, see docs/RELEASING.md), not a pseudo-version", m.dir, r.Path, r.Version)
				continue
			}
			versions[r.Version] = append(versions[r.Version], m.dir+" requires "+r.Path)
			want, err := filepath.Rel(filepath.Join(root, m.dir), filepath.Join(root, dir))
			if err != nil {
				t.Fatal(err)
			}
			replaced := false
			for _, rp := range replaces {
				replaced = replaced || rp.Old.Path == r.Path && rp.Old.Version == "" &&
					filepath.Clean(rp.New.Path) == want
			}
			if !replaced {
				t.Errorf("%s: no `replace %s => %s`: keep it, so that the module builds against the "+
					"working tree in the repository", where, r.Path, filepath.ToSlash(want)+"/")
			}
		}
	}
	if len(versions) > 1 {
		t.Errorf("the nested modules require the repository's modules at different versions; one release tags them all at one version: %v", versions)
	}
}

// TestInstallable: a published module with a main package has no replace
// or exclude directive in its go.mod. `go install pkg@version`, the way
// users install the CLI, builds the module outside any main module and
// refuses one whose go.mod has either ("The go.mod file for the module
// providing named packages contains one or more replace directives"), so
// such a module keeps the replaces that development in the repository
// needs in a go.work beside its go.mod instead, which go install ignores
// and the go command uses in that directory (TestNestedRequires checks
// them). The go.work uses only its own module: a workspace that used the
// root's directory would still look up the required release of the root,
// which does not exist before it is tagged.
func TestInstallable(t *testing.T) {
	root := repoRoot(t)
	mods := modules(t, root)
	pub := publishedModules(t, mods)
	mains := mainPackages(t, root, pub)
	installable := 0
	for _, m := range pub {
		if len(mains[m.dir]) == 0 {
			continue
		}
		installable++
		if len(m.mod.Replace) > 0 || len(m.mod.Exclude) > 0 {
			t.Errorf("%s/go.mod has replace or exclude directives, so `go install %s@version` fails for users: "+
				"move the replaces to %s/go.work", m.dir, mains[m.dir][0], m.dir)
		}
		if m.dir == "." {
			continue
		}
		out := goCmd(t, filepath.Join(root, filepath.FromSlash(m.dir)), nil, time.Minute, "work", "edit", "-json", "go.work")
		var work struct{ Use []struct{ DiskPath string } }
		if err := json.Unmarshal(out, &work); err != nil {
			t.Fatalf("%s/go.work: go work edit -json: %v", m.dir, err)
		}
		if len(work.Use) != 1 || filepath.Clean(work.Use[0].DiskPath) != "." {
			t.Errorf("%s/go.work uses %v; want only `use .` (and replaces for the repository's modules)", m.dir, work.Use)
		}
	}
	if installable == 0 {
		t.Errorf("no published module has a main package; the CLI (cmd/dlock) is one")
	}
}

// mainPackages returns the import paths of the main packages of each
// module of mods, by directory (go list -find: no dependency is loaded).
func mainPackages(t *testing.T, root string, mods []module) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, m := range mods {
		list := goCmd(t, filepath.Join(root, filepath.FromSlash(m.dir)), nil, time.Minute,
			"list", "-find", "-f", "{{if eq .Name \"main\"}}{{.ImportPath}}{{end}}", "./...")
		// goCmd's output has the go command's stderr too: on a cold
		// module cache, its "go: downloading ..." lines, which are no
		// packages (they made a library module look like one with a main
		// package, TestNestedRequires then asking for a go.work).
		out[m.dir] = slices.DeleteFunc(trimLines(list), func(l string) bool { return strings.HasPrefix(l, "go: ") })
	}
	return out
}

// workReplaces returns the replace directives of the go.work in the
// directory dir of the repository at root (none if it has no go.work).
func workReplaces(t *testing.T, root, dir string) []replace {
	t.Helper()
	abs := filepath.Join(root, filepath.FromSlash(dir))
	if _, err := os.Stat(filepath.Join(abs, "go.work")); err != nil {
		return nil
	}
	var work struct{ Replace []replace }
	out := goCmd(t, abs, nil, time.Minute, "work", "edit", "-json", "go.work")
	if err := json.Unmarshal(out, &work); err != nil {
		t.Fatalf("%s/go.work: go work edit -json: %v", dir, err)
	}
	return work.Replace
}

// releaseVersion returns the version being released: the released version
// that the published nested modules require of the repository's modules
// (TestNestedRequires checks that they agree).
func releaseVersion(t *testing.T, mods []module) string {
	t.Helper()
	inRepo := map[string]bool{}
	for _, m := range mods {
		inRepo[m.mod.Module.Path] = true
	}
	seen := map[string]bool{}
	var versions []string
	for _, m := range publishedModules(t, mods)[1:] {
		for _, r := range m.mod.Require {
			if inRepo[r.Path] && isRelease(r.Version) && !seen[r.Version] {
				seen[r.Version] = true
				versions = append(versions, r.Version)
			}
		}
	}
	switch len(versions) {
	case 0:
		t.Fatalf("no published nested module requires a released version of %s: nothing says which version to release", rootPath)
	case 1:
		return versions[0]
	}
	t.Fatalf("the published nested modules require different released versions of the repository's modules: %v", versions)
	return ""
}

// tagName is the git tag of version v of the module in dir.
func tagName(dir, v string) string {
	if dir == "." {
		return v
	}
	return dir + "/" + v
}

// trimLines returns data's lines, without empty ones.
func trimLines(data []byte) []string {
	var lines []string
	for _, l := range bytes.Split(data, []byte("\n")) {
		if l := strings.TrimSpace(string(l)); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}
