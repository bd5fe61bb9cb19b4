package main

import (
	"context"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionString(t *testing.T) {
	for _, tt := range []struct {
		name string
		info *debug.BuildInfo
		ok   bool
		want []string
	}{
		{"no build info", nil, false, []string{"dlock (devel) (revision unknown"}},
		{"devel without vcs", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, GoVersion: "go1.99"}, true,
			[]string{"dlock (devel) (revision unknown", "go1.99"}},
		{"released", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-12-01T05:00:00Z"}, {Key: "vcs.modified", Value: "false"},
		}}, true, []string{"dlock v1.4.0 (revision 0123456789ab, 2026-12-01T05:00:00Z;"}},
		{"modified checkout", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261201050000-0123456789ab+dirty"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"},
		}}, true, []string{"dlock v0.0.0-20261201050000-0123456789ab+dirty (revision 0123456789ab, with local changes;"}},
	} {
		got := versionString(tt.info, tt.ok)
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q does not contain %q", tt.name, got, w)
			}
		}
	}
}

// The built binary says what its build info says: `go version -m` reads
// the same record from the file, so the two must agree, whether this build
// has VCS information or not.
func TestVersionFlag(t *testing.T) {
	r := dlockRun(t, nil, "--version")
	if r.code != 0 || r.stderr != "" || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("--version: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	out, err := exec.CommandContext(context.Background(), "go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	modVersion, revision := "", ""
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "mod":
			modVersion = f[2]
		case len(f) >= 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision="):
			revision = strings.TrimPrefix(f[1], "vcs.revision=")
		}
	}
	if modVersion == "" || !strings.HasPrefix(r.stdout, "dlock "+modVersion+" (") {
		t.Errorf("--version %q; go version -m says module version %q", r.stdout, modVersion)
	}
	switch {
	case revision == "" && !strings.Contains(r.stdout, "revision unknown"):
		t.Errorf("--version %q claims a revision the build info does not have", r.stdout)
	case revision != "" && !strings.Contains(r.stdout, "revision "+revision[:12]):
		t.Errorf("--version %q; go version -m says revision %s", r.stdout, revision)
	}
	t.Logf("dlock --version: %s", strings.TrimSpace(r.stdout))
}
