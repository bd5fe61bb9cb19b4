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
	checkGoBlocks(t, docs)
}

// The README's Go blocks are held to the guide's rule: each is the code of
// an Example, a test or a program (example_test.go, examples/quickstart),
// so the front door cannot show code that no longer compiles.
func TestReadmeCodeBlocksAreTested(t *testing.T) {
	checkGoBlocks(t, []string{"README.md"})
}

// checkGoBlocks fails for each ```go block of pages whose lines do not
// appear, one after the other, in a .go file of the repository.
func checkGoBlocks(t *testing.T, pages []string) {
	t.Helper()
	var sources [][]string
	for _, src := range repoFiles(t, ".go") {
		sources = append(sources, codeLines(src))
	}
	blocks := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range goBlock.FindAllStringSubmatch(string(b), -1) {
			blocks++
			want := codeLines(m[1])
			if !slices.ContainsFunc(sources, func(src []string) bool { return containsRun(src, want) }) {
				t.Errorf("%s: a Go block is in no .go file of the repository (keep it in an Example or test):\n%s", page, m[1])
			}
		}
	}
	t.Logf("%d Go blocks in %d pages, each found in the code", blocks, len(pages))
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

// mdLink is a Markdown link's target.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// The README's map links every guide page, and every relative link of the
// README and the guide leads to a file that exists and, for a #anchor into
// a Markdown page (the page itself, another guide page, the README, the
// CLI's README), to one of that page's headings: a section that moved to
// another page takes its links with it.
func TestReadmeLinksTheGuide(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	docs, _ := filepath.Glob("docs/*.md")
	for _, d := range docs {
		if !strings.Contains(string(readme), "]("+d+")") {
			t.Errorf("README does not link %s", d)
		}
	}
	for _, page := range append([]string{"README.md"}, docs...) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: link to %s: %v", page, target, err)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			anchors, err := headingAnchors(path)
			if err != nil {
				t.Fatal(err)
			}
			if !anchors[anchor] {
				t.Errorf("%s: link to %s: no heading #%s in %s", page, target, anchor, path)
			}
		}
	}
}

// htmlAnchor is an explicit anchor in a page: <a id="forced-unlock"></a>.
var htmlAnchor = regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)

// headingAnchors returns the anchors of a Markdown page: its headings',
// those inside fenced code blocks (a shell comment) left out, and its
// explicit <a id> anchors.
func headingAnchors(path string) (map[string]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	anchors := map[string]bool{}
	fenced := false
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "```"):
			fenced = !fenced
		case !fenced && strings.HasPrefix(l, "#"):
			anchors[slug(strings.TrimLeft(l, "# "))] = true
		case !fenced:
			for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
				anchors[m[1]] = true
			}
		}
	}
	return anchors, nil
}

// slug is GitHub's anchor of a heading: lower case, spaces to hyphens,
// punctuation other than hyphens dropped.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// exampleName is an Example function named in prose ("From `ExampleX`").
var exampleName = regexp.MustCompile("`(Example[A-Za-z0-9_]*)`")

// Every Example the README and the guide name exists, in some test file of
// the repository: a renamed option renames its Example, and the prose that
// sends a reader to it must follow.
func TestNamedExamplesExist(t *testing.T) {
	pages, _ := filepath.Glob("docs/*.md")
	pages = append(pages, "README.md", "cmd/dlock/README.md")
	all := strings.Join(repoFiles(t, "_test.go"), "\n")
	named := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range exampleName.FindAllStringSubmatch(string(b), -1) {
			named++
			if !strings.Contains(all, "func "+m[1]+"(") {
				t.Errorf("%s names %s, which no test file defines", page, m[1])
			}
		}
	}
	if named == 0 {
		t.Fatal("no Example named in the docs: the pattern no longer matches their prose")
	}
}

// repoFiles returns the contents of the repository's files whose names end
// with suffix, hidden directories left out.
func repoFiles(t *testing.T, suffix string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != "." && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, suffix) {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out = append(out, string(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
