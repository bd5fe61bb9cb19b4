//go:build !linux

package main

import "testing"

// startPostgres needs Linux: the Postgres tests run postgres as an
// unprivileged user (syscall.Credential) that dies with the test binary
// (Pdeathsig). Elsewhere they are skipped, saying so.
func startPostgres(t *testing.T) string {
	t.Skip("the Postgres tests need Linux (postgres as an unprivileged user that dies with the test binary)")
	return ""
}
