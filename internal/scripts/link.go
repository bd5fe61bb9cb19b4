package scripts

import (
	"regexp"
	"slices"
	"strings"
)

// link returns body preceded by the definitions of lib that it uses,
// directly or through each other, in lib's order. Redis runs a script's
// whole text on every call, and each `local function` it meets is a closure
// made anew: the acquire script used a handful of common.lua's twenty
// definitions, and making the others cost about a microsecond of Redis's
// time per call, a tenth of the script.
//
// lib is read as top-level definitions: each starts at a line that begins
// with "local" (the comment lines above it go with it) and runs to the next
// one. A definition is taken when one of the names it defines appears in
// the code (comments left out) of the body or of a definition taken. Any
// appearance counts, so a definition is never left out when used; at worst
// one is kept that is only named.
func link(lib, body string) string {
	defs := splitDefs(lib)
	need := map[string]bool{}
	var want func(code string)
	want = func(code string) {
		for _, id := range identifiers(code) {
			for _, d := range defs {
				if slices.Contains(d.names, id) && !need[id] {
					for _, n := range d.names {
						need[n] = true
					}
					want(d.code)
				}
			}
		}
	}
	want(stripComments(body))
	var b strings.Builder
	for _, d := range defs {
		if slices.ContainsFunc(d.names, func(n string) bool { return need[n] }) {
			b.WriteString(d.text)
		}
	}
	b.WriteString(body)
	return b.String()
}

// def is one top-level definition of a library: its whole text, its code
// without comments, and the names it defines.
type def struct {
	text, code string
	names      []string
}

var (
	identRe = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	// "local function name(" or "local a, b = ..." / "local a, b".
	localFuncRe = regexp.MustCompile(`^local\s+function\s+([A-Za-z_][A-Za-z0-9_]*)`)
	localVarsRe = regexp.MustCompile(`^local\s+([A-Za-z_][A-Za-z0-9_]*(?:\s*,\s*[A-Za-z_][A-Za-z0-9_]*)*)`)
)

func splitDefs(lib string) []def {
	var defs []def
	var pending strings.Builder // comment and blank lines before a definition
	for _, line := range strings.SplitAfter(lib, "\n") {
		if strings.HasPrefix(line, "local ") || strings.HasPrefix(line, "local\t") {
			d := def{text: pending.String() + line}
			if m := localFuncRe.FindStringSubmatch(line); m != nil {
				d.names = []string{m[1]}
			} else if m := localVarsRe.FindStringSubmatch(line); m != nil {
				for _, n := range strings.Split(m[1], ",") {
					d.names = append(d.names, strings.TrimSpace(n))
				}
			}
			pending.Reset()
			defs = append(defs, d)
			continue
		}
		if len(defs) > 0 && !isCommentOrBlank(line) {
			defs[len(defs)-1].text += pending.String() + line
			pending.Reset()
			continue
		}
		pending.WriteString(line)
	}
	for i := range defs {
		defs[i].code = stripComments(defs[i].text)
	}
	return defs
}

func isCommentOrBlank(line string) bool {
	t := strings.TrimSpace(line)
	return t == "" || strings.HasPrefix(t, "--")
}

// stripComments drops "--" comments. dlock's scripts have no "--" inside
// strings.
func stripComments(src string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(src, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i] + "\n"
		}
		b.WriteString(line)
	}
	return b.String()
}

func identifiers(code string) []string { return identRe.FindAllString(code, -1) }
