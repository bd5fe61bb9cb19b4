package main

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// The library checks names and options too, but says so in its own terms
// (the operation "new", the function AcquireAll) and echoes a name however
// long it is. The CLI checks them first, to name the flag or argument and
// the bound broken.

// oneName is the positional check of the commands that take one lock NAME.
func oneName(cmd *cobra.Command, args []string) error {
	if err := exactArgs(1, "one lock NAME")(cmd, args); err != nil {
		return err
	}
	return checkName(args[0])
}

// checkName refuses a name the library would refuse, saying so with the
// name cut to a readable length.
func checkName(name string) error {
	switch {
	case name == "":
		return usagef("the lock name is empty")
	case len(name) > dlock.MaxNameLength:
		return usagef("lock name %s is %d bytes long: at most %d", shortName(name), len(name), dlock.MaxNameLength)
	}
	return nil
}

// checkNames checks each of run's names, and that none comes twice: the
// library's AcquireAll refuses that too, naming itself.
func checkNames(names []string) error {
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if err := checkName(n); err != nil {
			return err
		}
		if seen[n] {
			return usagef("-N/--name %s is given twice: each lock is taken once", shortName(n))
		}
		seen[n] = true
	}
	return nil
}

// shownNameLen is how much of a long name a message shows.
const shownNameLen = 40

// shortName quotes name for a message, cut after shownNameLen bytes (on a
// rune boundary) and marked so, so that a name of hundreds of bytes does
// not bury the message it is part of.
func shortName(name string) string {
	if len(name) <= shownNameLen {
		return strconv.Quote(name)
	}
	cut := shownNameLen
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return strconv.Quote(name[:cut]) + "…"
}

// checkPrefix refuses a --prefix the library would refuse: braces would
// make part of it a Cluster hash tag, and the locks' keys depend on where
// the tag is.
func checkPrefix(prefix string) error {
	if strings.ContainsAny(prefix, "{}") {
		return usagef("--prefix %q must not contain '{' or '}': dlock puts the lock name in braces (a Redis Cluster hash tag) after it", prefix)
	}
	return nil
}
