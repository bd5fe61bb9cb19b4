package main

import (
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock"
)

// COMMAND runs code dlock did not write: a script that prints its
// environment into a log, a crash reporter that uploads it, a tool that
// passes it on to its own children. What dlock was given to reach Redis
// and to guard the admin view is not COMMAND's to have, and neither is
// the lock's token, with which its reader can release the lock from under
// the holder. Those are withheld unless --pass-env names them.
var (
	// secretEnv are withheld whole.
	secretEnv = []string{"DLOCK_PASSWORD", "REDISCLI_AUTH", adminTokenEnv}
	// urlEnv keep the server they name, without the password: a child may
	// well reach the same Redis with credentials of its own.
	urlEnv = []string{"DLOCK_URL", "REDIS_URL"}
	// lockEnv are what run tells COMMAND about its lock. Inherited values
	// (from an outer dlock run) are dropped first: they describe another
	// lock. DLOCK_TOKEN is exported only on request.
	lockEnv = []string{"DLOCK_NAME", "DLOCK_FENCE", "DLOCK_FENCES", tokenEnv}
)

// tokenEnv would carry the lock's full token: nothing of dlock's reads it,
// and whoever has it can release the lock, so COMMAND gets it only with
// --pass-env DLOCK_TOKEN.
const tokenEnv = "DLOCK_TOKEN"

// passableEnv are the names --pass-env takes.
func passableEnv() []string { return slices.Concat(secretEnv, urlEnv, []string{tokenEnv}) }

// checkPassEnv refuses a --pass-env name run does not withhold: passing it
// would change nothing, and the user most likely misspelt the one they
// meant.
func checkPassEnv(names []string) error {
	for _, n := range names {
		if !slices.Contains(passableEnv(), n) {
			return usagef("--pass-env %s: run withholds only %s (and the password of %s); every other variable reaches COMMAND as it is",
				n, strings.Join(slices.Concat(secretEnv, []string{tokenEnv}), ", "), strings.Join(urlEnv, " and "))
		}
	}
	return nil
}

// childEnv is COMMAND's environment: base without the secrets (but those
// pass names), then the lock's variables.
func childEnv(base []string, lock dlock.Lock, pass []string) []string {
	env := make([]string, 0, len(base)+4)
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case slices.Contains(lockEnv, k):
			continue
		case slices.Contains(pass, k):
			// Passed as it is, password included.
		case slices.Contains(secretEnv, k):
			continue
		case slices.Contains(urlEnv, k):
			var ok bool
			if v, ok = withoutPassword(v); !ok {
				continue
			}
			kv = k + "=" + v
		}
		env = append(env, kv)
	}
	env = append(env,
		"DLOCK_NAME="+lock.Name(),
		"DLOCK_FENCE="+strconv.FormatInt(lock.Fence(), 10))
	if m, ok := lock.(*dlock.MultiLock); ok {
		fences := make([]string, 0, len(m.Fences()))
		for _, f := range m.Fences() {
			fences = append(fences, strconv.FormatInt(f, 10))
		}
		env = append(env, "DLOCK_FENCES="+strings.Join(fences, ","))
	}
	if slices.Contains(pass, tokenEnv) {
		env = append(env, tokenEnv+"="+lock.Token())
	}
	return env
}

// withoutPassword returns the Redis URL raw without its password, the user
// name kept; false when raw has an '@' but does not parse, where a
// password cannot be told from the rest and the variable is dropped.
func withoutPassword(raw string) (string, bool) {
	if !strings.Contains(raw, "@") {
		return raw, true // host:port, or a URL without credentials
	}
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return "", false
	}
	if _, has := u.User.Password(); !has {
		return raw, true
	}
	if name := u.User.Username(); name != "" {
		u.User = url.User(name)
	} else {
		u.User = nil
	}
	return u.String(), true
}
