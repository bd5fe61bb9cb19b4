package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestCallgrindTotalReadsTheSummaryLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "callgrind.out")
	// The head and tail of a real callgrind output file.
	body := "# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\npid: 42\n" +
		"events: Ir\nsummary: 421448152\n\nfl=(1) ae.c\nfn=(1) aeMain\n16 3\n\ntotals: 421448152\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := callgrindTotal(path)
	if err != nil || n != 421448152 {
		t.Fatalf("callgrindTotal = %d, %v; want 421448152", n, err)
	}
	// --instr-atstart=no writes "summary: 0" in the header: totals has the count.
	if err := os.WriteFile(path, []byte("events: Ir\nsummary: 0\n\nfn=(1) aeMain\n16 3\n\ntotals: 120058352\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err := callgrindTotal(path); err != nil || n != 120058352 {
		t.Fatalf("callgrindTotal = %d, %v; want the totals line's 120058352", n, err)
	}
	if err := os.WriteFile(path, []byte("events: Ir\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := callgrindTotal(path); err == nil {
		t.Fatal("a file without a count was read as one")
	}
}

// TestInstructionModeCountsOnlyTheCycles runs the mode on a few cycles:
// a count of the whole server's life (start-up, warm-up, the scripts'
// loading) or of nothing would not grow with the cycles, and dlock's
// scripts cost Redis more per cycle than SET NX and a compare-and-delete.
func TestInstructionModeCountsOnlyTheCycles(t *testing.T) {
	cfg, libs, vgdb := instructionMode(t, "-instructions", "100", "-g", "1", "-libs", "raw,dlock")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	per := map[string]float64{}
	for _, n := range []int64{100, 300} {
		cfg.instructions = n
		for _, lib := range libs {
			r := countCycles(ctx, cfg, vgdb, lib, 1)
			if r.err != nil {
				t.Fatalf("%s, %d cycles: %v", lib.name, n, r.err)
			}
			if r.cycles != n {
				t.Fatalf("%s: %d cycles counted, want %d", lib.name, r.cycles, n)
			}
			// The window holds the cycles' commands and nothing else: raw's
			// SET, EVALSHA, GET, DEL; dlock's two scripts and the 8 and 4
			// commands inside them (see docs/performance.md).
			if want := map[string]int64{"raw": 4, "dlock": 14}[lib.name] * n; r.commands != want {
				t.Errorf("%s: %d server commands over %d cycles, want %d", lib.name, r.commands, n, want)
			}
			if n == 100 {
				per[lib.name] = float64(r.instr)
				continue
			}
			// Three times the cycles: about three times the count (serverCron
			// and expiry make it differ a little), never the same.
			if ratio := float64(r.instr) / per[lib.name]; ratio < 2 || ratio > 4 {
				t.Errorf("%s: %d instructions for 300 cycles, %.0f for 100: ratio %.2f, want about 3", lib.name, r.instr, per[lib.name], ratio)
			}
			per[lib.name] = float64(r.instr) / float64(n)
		}
	}
	if per["dlock"] <= per["raw"] {
		t.Errorf("dlock %.0f instructions per cycle, raw %.0f: the scripts were not counted", per["dlock"], per["raw"])
	}
}

// TestInstructionModeCountsWholeCyclesPerGoroutine: with G goroutines the
// count covers a whole number of cycles each, and says how many ran.
func TestInstructionModeCountsWholeCyclesPerGoroutine(t *testing.T) {
	cfg, libs, vgdb := instructionMode(t, "-instructions", "100", "-g", "3", "-libs", "raw")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := countCycles(ctx, cfg, vgdb, libs[0], 3)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.cycles != 99 || r.instr <= 0 {
		t.Fatalf("%d cycles, %d instructions; want 99 cycles (33 on each of 3 goroutines) and a count", r.cycles, r.instr)
	}
}

// instructionMode parses args as the command line would and returns the
// configuration, its libraries and vgdb's path.
func instructionMode(t *testing.T, args ...string) (*config, []library, string) {
	t.Helper()
	cfg, err := parseFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	libs, err := selectLibraries(cfg.libs)
	if err != nil {
		t.Fatal(err)
	}
	vgdb, err := findVgdb(cfg.valgrind)
	if err != nil {
		t.Fatalf("%v (valgrind is installed by make test-deps)", err)
	}
	return cfg, libs, vgdb
}
