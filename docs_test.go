package dlock_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// goBlock is a fenced Go code block of a Markdown file.
var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// Every Go code block of the guide (docs/*.md) is code that compiles and
// runs in a test: its lines, spaces aside, appear one after the other in a
// .go file of the repository (an Example, a test, a program). A block edited
// in the guide and not in its example, or the reverse, fails here.
func TestGuideCodeBlocksAreTested(t *testing.T) {
	docs, err := filepath.Glob("docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	var sources [][]string
	err = filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != "." && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sources = append(sources, codeLines(string(b)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range goBlock.FindAllStringSubmatch(string(b), -1) {
			blocks++
			want := codeLines(m[1])
			if !slices.ContainsFunc(sources, func(src []string) bool { return containsRun(src, want) }) {
				t.Errorf("%s: a Go block is in no .go file of the repository (keep it in an Example or test):\n%s", doc, m[1])
			}
		}
	}
	t.Logf("%d Go blocks in %d guide pages, each found in the code", blocks, len(docs))
}

// codeLines returns the non-empty lines of s, trimmed.
func codeLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// containsRun reports whether want appears in src as consecutive lines.
func containsRun(src, want []string) bool {
	if len(want) == 0 {
		return true
	}
	for i := 0; i+len(want) <= len(src); i++ {
		if slices.Equal(src[i:i+len(want)], want) {
			return true
		}
	}
	return false
}
