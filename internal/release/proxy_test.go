package release

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"
)

// writeProxy writes, under dir, a module proxy in the layout of `go help
// goproxy` (usable as GOPROXY=file://dir) that serves each module of pub at
// version v, made from the working tree of the repository at root: the
// files git tracks, or would track (untracked ones that are not ignored),
// as they are on disk, less those a module zip leaves out (other modules'
// directories, vendor directories, anything but regular files). It returns
// the number of files put in each module's zip, by directory.
func writeProxy(t *testing.T, dir, root, v string, mods, pub []module) map[string]int {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files in %s: %v", root, err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	counts := map[string]int{}
	for _, m := range pub {
		var zipBuf bytes.Buffer
		zw := zip.NewWriter(&zipBuf)
		prefix := m.mod.Module.Path + "@" + v + "/"
		for _, f := range files {
			rel, ok := within(m.dir, f)
			if !ok || inOtherModule(m.dir, f, mods) || inVendor(rel) {
				continue
			}
			info, err := os.Lstat(filepath.Join(root, filepath.FromSlash(f)))
			if err != nil || !info.Mode().IsRegular() {
				continue // deleted in the work tree, a symbolic link, ...
			}
			data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
			if err != nil {
				t.Fatal(err)
			}
			w, err := zw.CreateHeader(&zip.FileHeader{Name: prefix + rel, Method: zip.Deflate})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(data); err != nil {
				t.Fatal(err)
			}
			counts[m.dir]++
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		goModData, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(m.dir), "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		info, err := json.Marshal(struct{ Version, Time string }{v, time.Now().UTC().Format(time.RFC3339)})
		if err != nil {
			t.Fatal(err)
		}
		vdir := filepath.Join(dir, filepath.FromSlash(escape(m.mod.Module.Path)), "@v")
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			t.Fatal(err)
		}
		ev := escape(v)
		for name, data := range map[string][]byte{
			"list":       []byte(v + "\n"),
			ev + ".info": info,
			ev + ".mod":  goModData,
			ev + ".zip":  zipBuf.Bytes(),
		} {
			if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return counts
}

// within returns file f (slash-separated, relative to the repository root)
// relative to module directory dir, if it is inside it.
func within(dir, f string) (string, bool) {
	if dir == "." {
		return f, true
	}
	if rel, ok := strings.CutPrefix(f, dir+"/"); ok {
		return rel, true
	}
	return "", false
}

// inOtherModule reports whether file f belongs to a module nested in the
// module at dir: a module zip has none of a nested module's files.
func inOtherModule(dir, f string, mods []module) bool {
	for _, m := range mods {
		if m.dir == dir || m.dir == "." {
			continue
		}
		if _, in := within(m.dir, f); in {
			if _, inDir := within(dir, m.dir); inDir {
				return true
			}
		}
	}
	return false
}

// inVendor reports whether the file at rel (relative to its module) is in a
// vendor directory, which module zips leave out.
func inVendor(rel string) bool {
	for d := path.Dir(rel); d != "." && d != "/"; d = path.Dir(d) {
		if path.Base(d) == "vendor" {
			return true
		}
	}
	return false
}

// escape is the case-encoding of module paths and versions in a proxy's
// URLs and file names: an upper-case letter becomes '!' and the letter in
// lower case.
func escape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"github.com/dlock-go/dlock":  "github.com/dlock-go/dlock",
		"github.com/BurntSushi/toml": "github.com/!burnt!sushi/toml",
		"v1.0.0-RC1":                 "v1.0.0-!r!c1",
	} {
		if got := escape(in); got != want {
			t.Errorf("escape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestInOtherModule(t *testing.T) {
	mods := []module{{dir: "."}, {dir: "dlockgrpc"}, {dir: "bench"}, {dir: "dlockgrpc/sub"}}
	for _, c := range []struct {
		dir, f string
		want   bool
	}{
		{".", "dlock.go", false},
		{".", "internal/release/doc.go", false},
		{".", "dlockgrpc/go.mod", true},
		{".", "bench/main.go", true},
		{".", "dlockgrpcx/a.go", false},
		{"dlockgrpc", "dlockgrpc/names.go", false},
		{"dlockgrpc", "dlockgrpc/sub/a.go", true},
	} {
		if got := inOtherModule(c.dir, c.f, mods); got != c.want {
			t.Errorf("inOtherModule(%q, %q) = %v, want %v", c.dir, c.f, got, c.want)
		}
	}
}
