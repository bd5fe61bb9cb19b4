package main

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// version is what dlock --version prints: the module's version and the VCS
// revision it was built from, as the Go toolchain recorded them in the
// binary. A `go install ...@v1.2.3` has the version; a build from a checkout
// has the revision (and, since Go 1.24, a pseudo-version) unless built with
// -buildvcs=false. What the binary does not know is said to be unknown, not
// guessed.
func version() string {
	info, ok := debug.ReadBuildInfo()
	return versionString(info, ok)
}

func versionString(info *debug.BuildInfo, ok bool) string {
	v, goVersion := "(devel)", runtime.Version()
	settings := map[string]string{}
	if ok && info != nil {
		if info.Main.Version != "" {
			v = info.Main.Version
		}
		if info.GoVersion != "" {
			goVersion = info.GoVersion
		}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
	}
	var rev []string
	if r := settings["vcs.revision"]; r != "" {
		if len(r) > 12 {
			r = r[:12]
		}
		rev = append(rev, "revision "+r)
		if t := settings["vcs.time"]; t != "" {
			rev = append(rev, t)
		}
		if settings["vcs.modified"] == "true" {
			rev = append(rev, "with local changes")
		}
	} else {
		rev = append(rev, "revision unknown: built without VCS information")
	}
	return "dlock " + v + " (" + strings.Join(rev, ", ") + "; " + goVersion + " " + runtime.GOOS + "/" + runtime.GOARCH + ")"
}
