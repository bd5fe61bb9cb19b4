package node_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/node"
)

// designDoc is the protocol's design document, which names every key and
// script of the protocol.
const designDoc = "../../docs/design.md"

// The sample values the keys are built with here, and what the design
// document writes in their place (its conventions: the default prefix and a
// lock called name). The samples are unlike the placeholders, so that a key
// the code builds reaches the document only through the substitution.
const (
	samplePrefix = "p7:"
	sampleName   = "order:42"
	sampleToken  = "0123456789abcdef0123456789abcdef"
	docBase      = "dlock:{name}"
	docToken     = "<token>"
	docClient    = "<client-id>"
)

// prefixPlaceholders says, for each field of Keys (or SemKeys) that holds
// the start of a name rather than a whole one, what the rest is: the
// document writes the name with that placeholder after it.
var prefixPlaceholders = map[string]string{
	"Handoff": docClient, // + the waiting Client's id: a channel per client
	"Record":  docToken,  // + the released token: a record per token
}

// TestDesignDocKeys: the key names in the design document's key table are
// exactly the ones internal/node builds, written in the document's form. A
// key the code builds that the table lacks fails, and so does a key in the
// table that the code does not build (a suffix renamed or dropped).
func TestDesignDocKeys(t *testing.T) {
	doc := readDoc(t)
	code := codeKeys(t)
	listed := docKeys(t, doc)
	for key, from := range code {
		if !listed[key] {
			t.Errorf("the code builds %s (%s); the key table of %s does not list it", key, from, designDoc)
		}
	}
	for key := range listed {
		if _, ok := code[key]; !ok {
			t.Errorf("the key table of %s lists %s; internal/node builds no such key", designDoc, key)
		}
	}
	t.Logf("%d key names built by internal/node, %d in the table", len(code), len(listed))
	// The token forms the document explains the fields and scripts by.
	for _, want := range []string{"`" + node.ReadersMarker + "`", "`" + node.SharedPrefix + "` + 32 hex", "`" + node.SemPrefix + "` + 32 hex"} {
		if !strings.Contains(doc, want) {
			t.Errorf("%s does not write the token form %s that internal/node uses", designDoc, want)
		}
	}
}

// TestDesignDocScripts: every script file is named in the design document,
// every .lua name it gives exists, and every script of package scripts is
// named as scripts.<Name>.
func TestDesignDocScripts(t *testing.T) {
	doc := readDoc(t)
	files := map[string]bool{}
	for _, dir := range []string{"../scripts", "../../redlock"} {
		paths, err := filepath.Glob(filepath.Join(dir, "*.lua"))
		if err != nil || len(paths) == 0 {
			t.Fatalf("no .lua files in %s: %v", dir, err)
		}
		for _, p := range paths {
			files[filepath.Base(p)] = true
		}
	}
	for f := range files {
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(f)).MatchString(doc) {
			t.Errorf("%s does not name the script file %s", designDoc, f)
		}
	}
	named := regexp.MustCompile(`[A-Za-z0-9_]+\.lua\b`).FindAllString(doc, -1)
	slices.Sort(named)
	for _, m := range slices.Compact(named) {
		if !files[m] {
			t.Errorf("%s names %s, which is in neither internal/scripts nor redlock", designDoc, m)
		}
	}
	vars := scriptVars(t, "../scripts/scripts.go")
	if len(vars) == 0 {
		t.Fatal("found no redis.NewScript variables in scripts.go")
	}
	for _, v := range vars {
		if !strings.Contains(doc, "`scripts."+v+"`") {
			t.Errorf("%s does not name the script scripts.%s", designDoc, v)
		}
	}
}

func readDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(designDoc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// codeKeys returns every key name internal/node builds for the sample
// prefix and name, in the document's form, with where it comes from: the
// fields of Keys and of SemKeys, and the keys of every call for an
// exclusive, a reader's and a permit's token. A field added to Keys, or a
// key a call builds on its own, is a key the document must list.
func codeKeys(t *testing.T) map[string]string {
	t.Helper()
	k := node.KeysOf(samplePrefix, sampleName)
	out := map[string]string{}
	fields := func(v any) {
		rv := reflect.ValueOf(v)
		for i := range rv.NumField() {
			f := rv.Type().Field(i)
			if !f.IsExported() || f.Type.Kind() != reflect.String {
				continue
			}
			name := rv.Field(i).String()
			if strings.HasSuffix(name, ":") {
				// The start of a name: a channel or a key per token.
				ph, ok := prefixPlaceholders[f.Name]
				if !ok {
					t.Errorf("%s.%s = %q is the start of a name; give it a placeholder in prefixPlaceholders and document it",
						rv.Type().Name(), f.Name, name)
					continue
				}
				out[documented(t, name)+ph] = rv.Type().Name() + "." + f.Name + " + " + ph
				continue
			}
			out[documented(t, name)] = rv.Type().Name() + "." + f.Name
		}
	}
	fields(k)
	fields(k.Sem())

	acq := node.AcquireArgs{TTL: time.Second, Waiter: "c", Alive: time.Second, QueueExpiry: time.Second,
		FenceLifetime: time.Hour, Permits: 2}
	rel := node.ReleaseArgs{Record: time.Second, FenceLifetime: time.Hour}
	for _, tok := range []string{sampleToken, node.SharedPrefix + sampleToken, node.SemPrefix + sampleToken} {
		retake := acq
		retake.Retake = true
		calls := map[string]node.Call{
			"Acquire": node.Acquire(k, tok, acq), "Acquire (retake)": node.Acquire(k, tok, retake),
			"Release": node.Release(k, tok, rel), "Refresh": node.Refresh(k, tok, time.Second), "PTTL": node.PTTL(k, tok),
		}
		for what, c := range calls {
			for _, key := range c.Keys() {
				d := documented(t, key)
				if rest, ok := strings.CutSuffix(d, tok); ok {
					d = rest + docToken
				}
				if _, seen := out[d]; !seen {
					out[d] = "a key of node." + what + " for token " + tok[:1] + "…"
				}
			}
		}
	}
	return out
}

// documented writes a key the code built for the sample prefix and name as
// the document does.
func documented(t *testing.T, key string) string {
	t.Helper()
	base := samplePrefix + "{" + sampleName + "}"
	rest, ok := strings.CutPrefix(key, base)
	if !ok {
		t.Fatalf("key %q does not start with %q: KeysOf no longer builds prefix{name}; section 1 of %s explains the hash tag by it",
			key, base, designDoc)
	}
	return docBase + rest
}

var (
	keyTable = regexp.MustCompile(`(?s)<!-- keys:begin -->(.*?)<!-- keys:end -->`)
	codeSpan = regexp.MustCompile("`([^`]+)`")
)

// docKeys returns the key names in the first column of the document's key
// table, between its markers.
func docKeys(t *testing.T, doc string) map[string]bool {
	t.Helper()
	tables := keyTable.FindAllStringSubmatch(doc, -1)
	if len(tables) != 1 {
		t.Fatalf("%s has %d key tables between <!-- keys:begin --> and <!-- keys:end -->, want 1", designDoc, len(tables))
	}
	keys := map[string]bool{}
	for line := range strings.SplitSeq(tables[0][1], "\n") {
		cells := strings.Split(strings.TrimSpace(line), "|")
		if len(cells) < 3 || cells[0] != "" {
			continue // not a table row
		}
		for _, m := range codeSpan.FindAllStringSubmatch(cells[1], -1) {
			if !strings.HasPrefix(m[1], docBase) {
				t.Errorf("key table of %s: %q in the key column is not written as %s…", designDoc, m[1], docBase)
				continue
			}
			keys[m[1]] = true
		}
	}
	if len(keys) == 0 {
		t.Fatalf("found no keys in the key table of %s", designDoc)
	}
	return keys
}

// scriptVars returns the names of the variables of path that are set to a
// redis.NewScript.
func scriptVars(t *testing.T, path string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		spec, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, v := range spec.Values {
			call, ok := v.(*ast.CallExpr)
			if !ok {
				continue
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "NewScript" && i < len(spec.Names) {
				names = append(names, spec.Names[i].Name)
			}
		}
		return true
	})
	slices.Sort(names)
	return names
}

// TestDesignDocNamesLiveTests checks that every test file the design
// document names (`name_test.go`, relative to the repository root, to
// internal/ or to one of its packages) exists, and that every test it names
// (TestXxx) is defined in some test file of the repository: a test renamed
// or moved fails here until the page follows it.
func TestDesignDocNamesLiveTests(t *testing.T) {
	doc := readDoc(t)
	root := "../.."
	var files []string
	defined := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, "_test.go") {
			rel, _ := filepath.Rel(root, path)
			files = append(files, filepath.ToSlash(rel))
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range regexp.MustCompile(`(?m)^func (Test\w+)\(`).FindAllStringSubmatch(string(src), -1) {
				defined[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile("`([\\w/]+_test\\.go)`").FindAllStringSubmatch(doc, -1) {
		name := m[1]
		if !slices.ContainsFunc(files, func(f string) bool { return f == name || strings.HasSuffix(f, "/"+name) }) {
			t.Errorf("%s names %s, which no longer exists", designDoc, name)
		}
	}
	for _, m := range regexp.MustCompile(`\b(Test[A-Z]\w+)`).FindAllStringSubmatch(doc, -1) {
		if !defined[m[1]] {
			t.Errorf("%s names %s, which no test file defines", designDoc, m[1])
		}
	}
}
