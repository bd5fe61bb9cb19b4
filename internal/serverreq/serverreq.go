// Package serverreq is what dlock needs of a Redis server: the oldest
// versions it works with and the memory policy that keeps locks, with the
// reasons. The library checks them at first use (servercheck.go) and
// dlock doctor reports them; both read them here so they cannot drift.
package serverreq

import (
	"fmt"
	"strconv"
	"strings"
)

// Oldest servers dlock works with, by redis_version (Valkey and KeyDB report
// one too).
var (
	// Min: the scripts read TIME before they write, which Redis refuses
	// under verbatim script replication; effects replication, which allows
	// it, is the default from 5.0 on.
	Min = [2]int{5, 0}
	// MinCluster: in a Cluster, hand-offs go over shard channels
	// (SPUBLISH, SSUBSCRIBE), which came in 7.0.
	MinCluster = [2]int{7, 0}
)

// Why the minimums are what they are, for messages.
const (
	WhyMin        = "its scripts read TIME before writing, which Redis allows by default from 5.0 on"
	WhyMinCluster = "lock hand-offs use the shard channels SPUBLISH and SSUBSCRIBE"
)

// EvictionFix is the command that makes Redis keep every lock until its TTL.
const EvictionFix = "CONFIG SET maxmemory-policy noeviction"

// Older reports whether v is older than major.minor m.
func Older(v [3]int, m [2]int) bool {
	return v[0] < m[0] || (v[0] == m[0] && v[1] < m[1])
}

// Parse reads "major.minor" or "major.minor.patch", allowing a suffix after
// the last number ("7.2.4-rc1"). Anything else, a major alone included, is
// not a version.
func Parse(s string) (v [3]int, ok bool) {
	rest := strings.TrimSpace(s)
	for i := range v {
		digits := len(rest) - len(strings.TrimLeft(rest, "0123456789"))
		if digits == 0 || digits > 9 { // 9 digits cannot overflow an int
			return v, false
		}
		v[i], _ = strconv.Atoi(rest[:digits])
		rest = rest[digits:]
		if i == 2 || !strings.HasPrefix(rest, ".") {
			return v, i > 0 && !strings.HasPrefix(rest, ".")
		}
		rest = rest[1:]
	}
	return v, false
}

// EvictionRisk tells whether a server with the given maxmemory-policy may
// evict held locks, and why, in a sentence a user can act on. Every lock key
// has a TTL, so volatile-* policies may pick it as readily as allkeys-*: an
// evicted lock is free, and a second client takes it while the first still
// believes it holds it. noeviction makes writes fail instead, loudly. An
// empty policy (unknown) carries no risk that can be named.
func EvictionRisk(policy string) (string, bool) {
	p := strings.ToLower(strings.TrimSpace(policy))
	var why string
	switch {
	case p == "" || p == "noeviction":
		return "", false
	case strings.HasPrefix(p, "volatile-"):
		why = "evicts keys that have a TTL when memory is full, and every lock key has one"
	case strings.HasPrefix(p, "allkeys-"):
		why = "evicts any key when memory is full, lock keys included"
	default:
		why = "is not noeviction, so Redis may evict keys when memory is full, lock keys included"
	}
	return fmt.Sprintf("maxmemory-policy %s %s: an evicted lock is free, and a second client can take it while the first still holds it. Run %s (and set it in redis.conf or the provider's parameter group)",
		policy, why, EvictionFix), true
}

// Server is what a server says it is in INFO server. Valkey reports
// redis_version 7.2.4 for ever, for clients that compare it; its own
// version is valkey_version (and server_name is valkey).
type Server struct {
	Name    string // "Redis" or "Valkey"
	Version string // its own version; "" when it did not say
	Compat  string // the redis_version a Valkey reports; "" for Redis
}

// Identify reads a server from INFO server's fields; field returns "" for
// a field the reply does not have.
func Identify(field func(key string) string) Server {
	if v := field("valkey_version"); v != "" || strings.EqualFold(field("server_name"), "valkey") {
		if v == "" {
			v = field("redis_version")
		}
		return Server{Name: "Valkey", Version: v, Compat: field("redis_version")}
	}
	return Server{Name: "Redis", Version: field("redis_version")}
}

// String is "Redis 7.0.15", or "Valkey 8.0.1 (redis_version 7.2.4)".
func (s Server) String() string {
	v := s.Version
	if v == "" {
		v = "(version not shown)"
	}
	if s.Compat != "" && s.Compat != s.Version {
		return fmt.Sprintf("%s %s (redis_version %s)", s.Name, v, s.Compat)
	}
	return s.Name + " " + v
}

// Need is the oldest version of a kind of server dlock works with.
type Need struct {
	Min [2]int
	Why string
}

// Need returns the oldest version of s's kind that dlock works with, alone
// or as a Cluster node. Every Valkey qualifies (its releases start at 7.2,
// from Redis 7.2.4); in a Cluster, what the shard channels need is asked of
// the server itself (COMMAND INFO SPUBLISH: ShardChannels), not read from
// its version.
func (s Server) Need() Need {
	if s.Name == "Valkey" {
		return Need{Min: [2]int{7, 2}, Why: "every Valkey release runs dlock's scripts"}
	}
	return Need{Min: Min, Why: WhyMin}
}

// Text is how a message says it: "dlock needs Redis 5.0 or newer".
func (n Need) Text(s Server) string {
	return fmt.Sprintf("dlock needs %s %d.%d or newer", s.Name, n.Min[0], n.Min[1])
}

// CommandsQuery is the COMMAND INFO query whose answer Commands reads:
// pipelined with the INFO and CONFIG reads of a check. What a server can do
// is asked of it, not read from its version.
var CommandsQuery = []any{"command", "info", "spublish", "waitaof"}

// Known is what the answer to CommandsQuery says a server has; a field is
// nil when the server refused to say (NOPERM, an old server without
// COMMAND INFO).
type Known struct {
	ShardChannels *bool // SPUBLISH: the shard channels a Cluster's hand-offs use
	WaitAOF       *bool // WAITAOF: dlock.WithDurableGrant
}

// Commands reads the answer to CommandsQuery.
func Commands(val any, err error) Known {
	reply, ok := val.([]any)
	if err != nil || !ok || len(reply) != 2 {
		return Known{}
	}
	shard, waitAOF := reply[0] != nil, reply[1] != nil
	return Known{ShardChannels: &shard, WaitAOF: &waitAOF}
}

// EarlyWaitAOF reports whether s may answer WAITAOF's numlocal before the
// fsync it stands for when appendfsync is everysec: the branch of
// flushAppendOnlyFile that advances the fsynced offset with writes not yet
// fsynced, added in Redis 7.2 (redis/redis#12622) and fixed in Redis 8.0
// (redis/redis#13793). Every Valkey release so far has it: 8.0.1 here (a
// crash cut to the last fsync lost writes WAITAOF had confirmed:
// TestWAITAOFConfirmsBeforeFsyncUnderEverysec), 8.1.10 and 9.1.2 as
// reported. A version it cannot read counts as early: the caller refuses
// rather than trusts.
func EarlyWaitAOF(s Server) bool {
	if s.Name == "Valkey" {
		return true
	}
	v, ok := Parse(s.Version)
	return !ok || Older(v, [2]int{8, 0})
}
