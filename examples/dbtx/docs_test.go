package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docs are the pages that quote this module's code.
var docs = []string{"../../docs/transactions.md", "README.md"}

// Every ```go block of the docs is a run of whole lines, verbatim, of a Go
// file of this module, which compiles and runs in its tests: the guide
// cannot drift from the code it quotes.
func TestDocsQuoteCode(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var sources []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, "\n"+string(b))
	}
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		blocks := goBlocks(string(b))
		if len(blocks) == 0 {
			t.Errorf("%s: no ```go block: nothing checked", doc)
		}
		for _, block := range blocks {
			found := false
			for _, src := range sources {
				found = found || strings.Contains(src, "\n"+block)
			}
			if !found {
				t.Errorf("%s: this block is not in any Go file of the module:\n%s", doc, block)
			}
		}
	}
}

// goBlocks returns the ```go blocks of a Markdown text, each with its
// lines' final newlines.
func goBlocks(md string) []string {
	var blocks []string
	var cur *strings.Builder
	for line := range strings.Lines(md) {
		switch trimmed := strings.TrimSpace(line); {
		case cur == nil && trimmed == "```go":
			cur = new(strings.Builder)
		case cur != nil && trimmed == "```":
			blocks = append(blocks, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line)
		}
	}
	return blocks
}
