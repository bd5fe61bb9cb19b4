package main

import (
	"errors"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// seconds is a duration flag that also takes a bare number of seconds,
// whole or not: flock -w 5 and etcdctl --ttl 5 mean seconds, and users
// bring the habit. "5", "0.5", "1.5s" and "1m30s" all parse.
type seconds struct{ d *time.Duration }

// durationFlag registers a duration flag that accepts Go durations and bare
// seconds (see seconds). short may be "". Every duration flag of the CLI
// goes through it, so they all read the same way.
func durationFlag(fs *pflag.FlagSet, p *time.Duration, name, short string, value time.Duration, usage string) {
	*p = value
	fs.VarP(seconds{p}, name, short, usage)
}

// String is "0" for zero, which pflag takes for "no default" and leaves out
// of --help, as it does for its own duration flags.
func (s seconds) String() string {
	if s.d == nil || *s.d == 0 {
		return "0"
	}
	return s.d.String()
}

// Type is what pflag shows in --help beside the flag.
func (s seconds) Type() string { return "duration" }

// Set parses v. pflag puts the flag's name and v before the error, so the
// error only says what would have worked.
func (s seconds) Set(v string) error {
	d, err := parseSeconds(v)
	if err != nil {
		return err
	}
	*s.d = d
	return nil
}

var errDurationSyntax = errors.New("not a duration: write it as 30s, 1m30s or 500ms, or as seconds: 5, 0.5")

// bareSeconds is a plain decimal number: no exponent, hex or "inf", which
// strconv.ParseFloat would take but nobody means as a timeout.
var bareSeconds = regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)$`)

func parseSeconds(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if !bareSeconds.MatchString(v) {
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, errDurationSyntax
		}
		return d, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, errDurationSyntax
	}
	ns := f * float64(time.Second)
	if ns >= math.MaxInt64 || ns <= math.MinInt64 {
		return 0, errors.New("out of range: at most 9223372036 seconds (about 292 years)")
	}
	// Rounded to the nanosecond: 0.1 is 100ms, not 99.999999ms.
	return time.Duration(math.Round(ns)), nil
}
