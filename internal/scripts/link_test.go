package scripts

import (
	"strings"
	"testing"
)

// Every name of the library that a linked script mentions in its code is
// defined in it, before the script's own body: a definition left out would
// only fail when Redis reaches the line that calls it.
func TestLinkKeepsWhatIsUsed(t *testing.T) {
	libs := map[string]string{"common": commonSrc, "sem": commonSrc + semCommonSrc}
	cases := []struct{ name, lib, body string }{
		{"acquire", "common", acquireSrc}, {"release", "common", releaseSrc}, {"refresh", "common", refreshSrc},
		{"acquire_shared", "common", acquireSharedSrc}, {"release_shared", "common", releaseSharedSrc},
		{"refresh_shared", "common", refreshSharedSrc}, {"pttl_shared", "common", pttlSharedSrc},
		{"sem_acquire", "sem", semAcquireSrc}, {"sem_release", "sem", semReleaseSrc}, {"sem_refresh", "sem", semRefreshSrc},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			linked := link(libs[c.lib], c.body)
			if !strings.HasSuffix(linked, c.body) {
				t.Fatal("the script's body is not at the end of the linked text")
			}
			kept := splitDefs(strings.TrimSuffix(linked, c.body))
			defined := map[string]bool{}
			for _, d := range kept {
				for _, n := range d.names {
					defined[n] = true
				}
			}
			for _, d := range splitDefs(libs[c.lib]) {
				for _, n := range d.names {
					for _, id := range identifiers(stripComments(linked)) {
						if id == n && !defined[n] {
							t.Errorf("%s is used but not defined", n)
						}
					}
				}
			}
			if len(kept) == len(splitDefs(libs[c.lib])) && c.name == "refresh" {
				t.Error("refresh kept every definition of the library: nothing was left out")
			}
		})
	}
}

// A library whose definitions use each other: only what the body reaches
// is kept, in the library's order, comments with their definition.
func TestLinkTakesWhatIsReached(t *testing.T) {
	lib := "-- a's comment\nlocal function a()\n  return b()\nend\n\nlocal function b()\n  return 1\nend\nlocal c = 3\n-- d mentions a only here\nlocal function d()\nend\n"
	got := link(lib, "return a()\n")
	want := "-- a's comment\nlocal function a()\n  return b()\nend\n\nlocal function b()\n  return 1\nend\nreturn a()\n"
	if got != want {
		t.Fatalf("link =\n%s\nwant\n%s", got, want)
	}
}
