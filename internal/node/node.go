// Package node is dlock's protocol on one Redis primary: the keys of a lock
// and the calls of its scripts, with their arguments and replies. The core
// package (dlock.Client) and the redlock package build on it, so neither
// reaches into the other's fields and the wire format is written once.
//
// It knows nothing of waiting, renewal or deadlines: those are the callers'.
package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/scripts"
)

// Keys of one lock. All share the hash tag {name}, so they live in one
// Cluster slot and one script can touch them all.
type Keys struct {
	Lock    string // hash: token, fence, owner, since, ttl
	Fence   string // counter of fencing tokens, expires after an idle lifetime
	Queue   string // zset of waiter tokens by arrival
	QData   string // hash of waiter token -> client id, ttl, alive until, owner
	Handoff string // prefix of the channels that tell a waiter it got the lock
	Record  string // prefix of the release records, one per released token

	// boxed holds Lock, Fence, Queue, QData, Handoff and the semaphore's
	// Permits and Data keys (see Sem) as interface values, boxed once in
	// KeysOf for the acquire and the release of the lock rather than in
	// every call. The lock's acquire reads the semaphore's keys to refuse a
	// name whose permits are held.
	boxed *[7]any
	// tok holds one token's arguments boxed (WithToken).
	tok *tokenArgs
}

// tokenArgs are the arguments of a token's calls that boxing would
// allocate on every call: the token and its release record's key.
type tokenArgs struct {
	token  string
	arg    any // token
	record any // Record + token
}

// WithToken returns k with token's arguments built once for the calls of
// one lock's life (its acquire, refreshes and release); a call for another
// token builds its own. k already made WithToken(token) is returned as is.
func (k Keys) WithToken(token string) Keys {
	if k.tok == nil || k.tok.token != token {
		k.tok = &tokenArgs{token: token, arg: token, record: k.Record + token}
	}
	return k
}

// tokenArgs returns token and its record key as arguments.
func (k Keys) tokenArgs(token string) (tok, record any) {
	if t := k.tok; t != nil && t.token == token {
		return t.arg, t.record
	}
	return token, k.Record + token
}

// box returns the keys as interface values for a call's arguments; a Keys
// not made by KeysOf boxes them now.
func (k Keys) box() *[7]any {
	if k.boxed != nil {
		return k.boxed
	}
	return &[7]any{k.Lock, k.Fence, k.Queue, k.QData, k.Handoff, k.Lock + sufSem, k.Lock + sufSemData}
}

// Key suffixes after the lock's own key.
const (
	sufFence   = ":fence"
	sufQueue   = ":q"
	sufQData   = ":qd"
	sufHandoff = ":w:"
	sufRecord  = ":r:"
)

// CheckPrefix says what is wrong with a key prefix, or nil. An empty one
// would give bare "{name}" keys beside the application's own, which no
// SCAN of dlock's keys could tell apart; '{' or '}' would change the keys'
// hash tag, and so their Cluster slot.
func CheckPrefix(p string) error {
	switch {
	case p == "":
		return errors.New(`prefix "" would leave the keys bare ("{name}"), mixed with the application's own: use the default "dlock:" or a prefix of your own`)
	case strings.ContainsAny(p, "{}"):
		return fmt.Errorf("prefix %q must not contain '{' or '}'", p)
	}
	return nil
}

// KeysOf returns the keys of the lock name under prefix.
func KeysOf(prefix, name string) Keys {
	// Keys are built on every acquisition, the hot path of an uncontended
	// lock: one concatenation (one allocation), every key a slice of it.
	all := prefix + "{" + name + "}" + sufFence + prefix + "{" + name + "}" + sufQueue +
		prefix + "{" + name + "}" + sufQData + prefix + "{" + name + "}" + sufHandoff +
		prefix + "{" + name + "}" + sufRecord + prefix + "{" + name + "}" + sufSem +
		prefix + "{" + name + "}" + sufSemData
	base := all[:len(prefix)+len(name)+2]
	off := 0
	take := func(suffix string) string {
		s := all[off : off+len(base)+len(suffix)]
		off += len(s)
		return s
	}
	k := Keys{Lock: base, Fence: take(sufFence), Queue: take(sufQueue), QData: take(sufQData),
		Handoff: take(sufHandoff), Record: take(sufRecord)}
	k.boxed = &[7]any{k.Lock, k.Fence, k.Queue, k.QData, k.Handoff, take(sufSem), take(sufSemData)}
	return k
}

// KeyKind tells which of a lock's keys a key is (ParseKey).
type KeyKind uint8

// The kinds of key ParseKey tells apart: one per key of Keys and SemKeys.
// The hand-off channels (Keys.Handoff) are not keys: SCAN never returns
// them.
const (
	KeyNone     KeyKind = iota // not a key of a lock under the prefix
	KeyLock                    // Keys.Lock, the lock's hash: prefix{name}
	KeyFence                   // Keys.Fence
	KeyQueue                   // Keys.Queue
	KeyQData                   // Keys.QData
	KeyRecord                  // Keys.Record + a token: a release record
	KeySem                     // SemKeys.Permits
	KeySemData                 // SemKeys.Data
	KeySemQueue                // SemKeys.Queue
	KeySemQData                // SemKeys.QData
)

var keyKindNames = [...]string{KeyNone: "none", KeyLock: "lock", KeyFence: "fence", KeyQueue: "queue",
	KeyQData: "queue data", KeyRecord: "record", KeySem: "sem", KeySemData: "sem data",
	KeySemQueue: "sem queue", KeySemQData: "sem queue data"}

func (k KeyKind) String() string {
	if int(k) < len(keyKindNames) {
		return keyKindNames[k]
	}
	return fmt.Sprintf("KeyKind(%d)", uint8(k))
}

// ParseKey is the inverse of KeysOf and Keys.Sem, for keys found by SCAN:
// it tells the name of the lock under prefix that key belongs to, and which
// of its keys it is; KeyNone (and no name) for any other key.
//
// A name may hold '{', '}' and the suffixes themselves ("x:q" is a name);
// the suffixes and tokens hold no '}', so what follows the key's last '}'
// is the suffix, and what lies between prefix{ and that '}' is the name.
// (A release record of a token with a '}', which no Client makes, is not
// told apart.)
func ParseKey(prefix, key string) (name string, kind KeyKind) {
	if len(key) <= len(prefix) || key[:len(prefix)] != prefix || key[len(prefix)] != '{' {
		return "", KeyNone
	}
	rest := key[len(prefix)+1:]
	end := strings.LastIndexByte(rest, '}')
	if end < 0 {
		return "", KeyNone
	}
	name, suffix := rest[:end], rest[end+1:]
	switch suffix {
	case "":
		return name, KeyLock
	case sufFence:
		return name, KeyFence
	case sufQueue:
		return name, KeyQueue
	case sufQData:
		return name, KeyQData
	case sufSem:
		return name, KeySem
	case sufSemData:
		return name, KeySemData
	case sufSemQueue:
		return name, KeySemQueue
	case sufSemQData:
		return name, KeySemQData
	}
	if token, ok := strings.CutPrefix(suffix, sufRecord); ok && token != "" {
		return name, KeyRecord
	}
	return "", KeyNone
}

// Match returns the SCAN pattern of every key of the locks under prefix
// whose names match the glob pattern glob: a key starts with the lock's
// hash, and the glob stands in for the name (so KeysOf(prefix, glob).Lock
// and .Sem().Permits are the patterns of one kind of key). The prefix is
// not escaped: callers check what SCAN returns with ParseKey.
func Match(prefix, glob string) string { return KeysOf(prefix, glob).Lock + "*" }

// SharedPrefix starts the token of every shared (read) acquisition. Real
// tokens are otherwise lowercase hex, so no exclusive token starts with it,
// and the calls below pick a reader's scripts by its token alone.
const SharedPrefix = "R"

// ReadersMarker is the token field of a lock that readers hold. No real
// token equals it, so the exclusive scripts see "held by another" and need
// no reader logic of their own.
const ReadersMarker = "*readers"

// IsShared reports whether token is a reader's.
func IsShared(token string) bool { return KindOf(token) == Shared }

// Call is one run of a script: the script, and the whole EVALSHA command
// ("evalsha", SHA, number of keys, keys, arguments), built once so that
// sending it copies nothing (the acquire and release of an uncontended lock
// are the hot path; see BenchmarkTryAcquireRelease).
type Call struct {
	script *redis.Script
	args   []any
	nkeys  int
}

// mkCall builds the call of s on its first nkeys vals as keys, the rest as
// arguments.
func mkCall(s *redis.Script, nkeys int, vals ...any) Call {
	args := make([]any, 3+len(vals))
	args[0], args[1], args[2] = "evalsha", shaOf(s), nkeys
	copy(args[3:], vals)
	return Call{script: s, args: args, nkeys: nkeys}
}

// shas holds each script's SHA as an interface value, boxed once rather
// than on every call.
var shas sync.Map // *redis.Script -> any(string)

func shaOf(s *redis.Script) any {
	if v, ok := shas.Load(s); ok {
		return v
	}
	v, _ := shas.LoadOrStore(s, any(s.Hash()))
	return v
}

// processor is what the Redis clients (and pipelines) that dlock is given
// have beside redis.Scripter: sending a command built in advance.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// Keys returns the call's keys.
func (c Call) Keys() []string {
	keys := make([]string, c.nkeys)
	for i := range keys {
		keys[i], _ = c.args[3+i].(string)
	}
	return keys
}

// argv is the call's arguments after its keys.
func (c Call) argv() []any { return c.args[3+c.nkeys:] }

// firstKey is the key a Cluster routes the call by.
func (c Call) firstKey() string {
	if c.nkeys == 0 {
		return ""
	}
	k, _ := c.args[3].(string)
	return k
}

func (c Call) cmd(ctx context.Context) *redis.Cmd {
	cmd := redis.NewCmd(ctx, c.args...)
	if c.nkeys > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// Run sends the call by SHA, and with its source after NOSCRIPT.
func (c Call) Run(ctx context.Context, rdb redis.Scripter) *redis.Cmd {
	p, ok := rdb.(processor)
	if !ok {
		return c.script.Run(ctx, rdb, c.Keys(), c.argv()...)
	}
	cmd := c.cmd(ctx)
	_ = p.Process(ctx, cmd)
	if isNoScript(cmd.Err()) {
		return c.script.Eval(ctx, rdb, c.Keys(), c.argv()...)
	}
	return cmd
}

// Queue adds the call to a pipeline: by SHA, or with its source (after the
// pipeline's first try answered NOSCRIPT). Pipeline does both.
func (c Call) Queue(ctx context.Context, pipe redis.Pipeliner, source bool) *redis.Cmd {
	if source {
		return c.script.Eval(ctx, pipe, c.Keys(), c.argv()...)
	}
	cmd := c.cmd(ctx)
	_ = pipe.Process(ctx, cmd)
	return cmd
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// Reply is one call's reply from Pipeline, and when the pipeline that
// carried it was sent: a lease the reply confirms is dated from then.
type Reply struct {
	*redis.Cmd
	Sent time.Time
}

// Pipeline sends calls in one pipeline on conn, by SHA, then the calls
// answered NOSCRIPT (after SCRIPT FLUSH or a restart) again with their
// source, in a second pipeline: what Run does for a single call, which
// go-redis does not do in a pipeline. then, if not nil, queues commands
// after the calls of each pipeline sent (WAIT, which counts the writes
// before it on its connection). Errors are read per reply.
func Pipeline(ctx context.Context, conn redis.Cmdable, calls []Call, then func(redis.Pipeliner)) []Reply {
	replies := make([]Reply, len(calls))
	send := func(source bool) {
		pipe := conn.Pipeline()
		sent := time.Now()
		for i, c := range calls {
			if source && !noScript(replies[i]) {
				continue // answered on the first try
			}
			replies[i] = Reply{Cmd: c.Queue(ctx, pipe, source), Sent: sent}
		}
		if then != nil {
			then(pipe)
		}
		_, _ = pipe.Exec(ctx) // errors are read per reply
	}
	send(false)
	if slices.ContainsFunc(replies, noScript) {
		send(true)
	}
	return replies
}

// WaitAOF reads a WAITAOF reply: how many local AOFs (0 or 1) and how many
// replicas' AOFs confirmed; 0, 0 for an error or an odd reply.
func WaitAOF(wait *redis.Cmd) (local, replicas int64) {
	if wait == nil || wait.Err() != nil {
		return 0, 0
	}
	v, ok := wait.Val().([]any)
	if !ok || len(v) != 2 {
		return 0, 0
	}
	local, _ = v[0].(int64)
	replicas, _ = v[1].(int64)
	return local, replicas
}

func noScript(r Reply) bool { return r.Cmd != nil && isNoScript(r.Err()) }

// AcquireArgs are the acquire script's arguments besides the token.
type AcquireArgs struct {
	TTL   time.Duration // the lease asked for
	Owner string        // free text stored with the lock
	// OwnerArg, when not nil, is Owner boxed by a caller that sends the
	// same owner on every call (a Client's default owner): boxing a string
	// costs an allocation.
	OwnerArg any
	// Waiter is the client id that queues this token when the lock is
	// busy, or "" for an attempt that does not queue.
	Waiter string
	// Alive is how long the waiter's entry lives without a renewed
	// attempt; QueueExpiry the queue's own expiry.
	Alive, QueueExpiry time.Duration
	FenceLifetime      time.Duration // the fence counter's idle lifetime
	// SkipWriters lets a reader join readers while a writer waits.
	SkipWriters bool
	// Retake marks a Redlock renewal taking a node again for its live
	// lock: a node where one attempt of the token was withdrawn
	// (ReleaseArgs.Withdraw) grants it; one where the token's lock ended
	// or was forced does not.
	Retake bool

	// Permits is n of a semaphore permit's token (IsSem), and Sharded
	// tells the waiters its acquire hands freed permits to on a shard
	// channel. The exclusive lock's acquire hands nothing on.
	Permits int
	Sharded bool
}

func (a AcquireArgs) ownerArg() any {
	if a.OwnerArg != nil {
		return a.OwnerArg
	}
	return a.Owner
}

// Acquire takes the lock for token if it is free (or ours already); a
// reader's token (Shared) takes a read lock; a semaphore token (Permit) one
// of a.Permits permits.
func Acquire(k Keys, token string, a AcquireArgs) Call {
	return kinds[KindOf(token)].acquire(k, token, a)
}

func lockAcquire(script *redis.Script) func(Keys, string, AcquireArgs) Call {
	return func(k Keys, token string, a AcquireArgs) Call {
		b := k.box()
		tok, record := k.tokenArgs(token)
		if a.Retake {
			// ARGV[9] only then: every other call stays as it was.
			return mkCall(script, 7, b[0], b[1], b[2], b[3], record, b[5], b[6],
				tok, ms(a.TTL), a.ownerArg(), a.Waiter, ms(a.Alive), ms(a.QueueExpiry), ms(a.FenceLifetime), flag(a.SkipWriters), "1")
		}
		return mkCall(script, 7, b[0], b[1], b[2], b[3], record, b[5], b[6],
			tok, ms(a.TTL), a.ownerArg(), a.Waiter, ms(a.Alive), ms(a.QueueExpiry), ms(a.FenceLifetime), flag(a.SkipWriters))
	}
}

// TokenRefused is Grant.HolderTTL for a token whose record refuses it (it
// was given up, released or force-unlocked): no attempt of it takes the
// lock again.
const TokenRefused = -3

// Grant is the acquire script's answer.
type Grant struct {
	OK    bool  // the lock is ours
	Fence int64 // our fence, when OK
	// HolderTTL is the holder's remaining lease in ms when not OK (-1: no
	// expiry, TokenRefused: the token was given up), HolderFence its fence. For a
	// semaphore: the time until the earliest permit's lease ends, and the
	// fence counter (above every grant before the attempt).
	HolderTTL, HolderFence int64
	// Semaphore refusals: Permits is the holders' n when they use another
	// one; Exclusive, that the name is held as an exclusive lock, and
	// Readers as a read lock.
	Permits   int64
	Exclusive bool
	Readers   bool
	// The refusal of a lock or read lock: SemHeld permits of the name's
	// semaphore of SemPermits are held.
	SemPermits, SemHeld int64

	// Who holds it, when busy (see holder_reply in common.lua and sem_busy
	// in sem_common.lua): the exclusive holder's Owner; its Kind, 'x' an
	// exclusive holder, 'r' readers (NReaders of them), 'm' a name kept for
	// its min hold, 's' a semaphore (Held of its N permits held); and the
	// Waiters in line. Zero when the reply did not say.
	Owner    string
	Kind     byte
	NReaders int64
	Held, N  int64
	Waiters  int64
}

// ParseGrant reads the acquire script's reply: {1, fence}; {0, pttl, holder
// fence, ...} with what holder_reply or sem_busy tell of the holder; or a
// refusal (a negative pttl).
func ParseGrant(res []any) (Grant, error) {
	if len(res) < 2 {
		return Grant{}, fmt.Errorf("unexpected reply of %d elements", len(res))
	}
	flag, ok1 := res[0].(int64)
	n, ok2 := res[1].(int64)
	if !ok1 || !ok2 {
		return Grant{}, fmt.Errorf("unexpected reply of types %T, %T", res[0], res[1])
	}
	if flag == 1 {
		return Grant{OK: true, Fence: n}, nil
	}
	g := Grant{HolderTTL: n}
	if len(res) > 2 {
		g.HolderFence, _ = res[2].(int64)
	}
	switch len(res) {
	case 7: // holder_reply
		g.Owner, _ = res[3].(string)
		if k, _ := res[4].(string); len(k) == 1 {
			g.Kind = k[0]
		}
		g.NReaders, _ = res[5].(int64)
		g.Waiters, _ = res[6].(int64)
	case 6: // sem_busy
		g.Kind = 's'
		g.Held, _ = res[3].(int64)
		g.N, _ = res[4].(int64)
		g.Waiters, _ = res[5].(int64)
	}
	switch n {
	case -4:
		return Grant{Permits: g.HolderFence}, nil
	case -5:
		return Grant{Exclusive: true}, nil
	case -6:
		return Grant{Readers: true}, nil
	case -7:
		g := Grant{SemPermits: g.HolderFence}
		if len(res) > 3 {
			g.SemHeld, _ = res[3].(int64)
		}
		return g, nil
	}
	return g, nil
}

// Refresh extends the lease of token's lock (or permit, for a semaphore
// token) to at least ttl; the reply is 1 when extended, 0 when it is not
// token's.
func Refresh(k Keys, token string, ttl time.Duration) Call {
	return kinds[KindOf(token)].refresh(k, token, ttl)
}

func lockRefresh(script *redis.Script) func(Keys, string, time.Duration) Call {
	return func(k Keys, token string, ttl time.Duration) Call {
		tok, _ := k.tokenArgs(token)
		return mkCall(script, 1, k.box()[0], tok, ms(ttl))
	}
}

// ReleaseArgs are the release script's arguments besides the token.
type ReleaseArgs struct {
	// Record is how long the record of this release is kept, so that a
	// re-sent release reports success; 0 leaves none (a forced unlock).
	Record time.Duration
	// GiveUp also drops the token's queue entry and marks it given up (a
	// waiter leaving, or a grant whose reply was lost): no attempt of the
	// token grants there while the record lives.
	GiveUp bool
	// Withdraw is GiveUp for one attempt of a Redlock whose lock may live
	// on other nodes: plain attempts of the token are refused there, but a
	// renewal of the live lock (AcquireArgs.Retake) may take the node
	// again. A record of an ended or forced lock is never turned into one.
	Withdraw bool
	// Forced marks a forced unlock: its record (kept for Record) refuses
	// every later attempt of the token, a Redlock's renewals included, and
	// makes the holder's own release report "not ours"; a forced unlock
	// sent again finds it and reports success.
	Forced bool
	// Sharded tells the next waiter on a shard channel (SPUBLISH).
	Sharded       bool
	FenceLifetime time.Duration
	// MinHold, when set, keeps a lock released before grant + MinHold
	// (server clock) until then, held by nobody (WithMinHold).
	MinHold time.Duration
}

// Release lets token's lock (or permit) go and hands it to the first live
// waiter. The reply is 1 when released now, 2 when this token was released
// before (a re-sent release), 0 when the lock is not token's.
func Release(k Keys, token string, a ReleaseArgs) Call {
	return kinds[KindOf(token)].release(k, token, a)
}

func lockRelease(script *redis.Script, withdrawable bool) func(Keys, string, ReleaseArgs) Call {
	return func(k Keys, token string, a ReleaseArgs) Call {
		b := k.box()
		tok, record := k.tokenArgs(token)
		return mkCall(script, 5, b[0], b[1], b[2], b[3], record,
			tok, ms(a.Record), releaseKind(a, withdrawable), b[4], flag(a.Sharded), ms(a.FenceLifetime), ms(a.MinHold))
	}
}

// releaseKind is the release scripts' ARGV[3]: '0' the holder's release,
// '1' a give-up, 'w' one attempt withdrawn, 'f' a forced unlock (see mark in
// common.lua). Only exclusive tokens are withdrawn (withdrawable): a Redlock
// takes no read locks and no permits.
func releaseKind(a ReleaseArgs, withdrawable bool) any {
	switch {
	case a.Forced:
		return argForced
	case a.Withdraw && !a.GiveUp && withdrawable:
		return argWithdraw
	}
	return flag(a.GiveUp)
}

// PTTL is the remaining lease of token's lock (or permit) in ms, -1 when
// not token's.
func PTTL(k Keys, token string) Call {
	return kinds[KindOf(token)].pttl(k, token)
}

func lockPTTL(script *redis.Script) func(Keys, string) Call {
	return func(k Keys, token string) Call { return mkCall(script, 1, k.box()[0], token) }
}

// Kind is what a token takes: the exclusive lock, a read lock of the same
// name, or one permit of the name's semaphore. Its token's prefix says
// which, so every call below is built from the token alone.
type Kind uint8

const (
	Exclusive Kind = iota // tokens of lowercase hex
	Shared                // SharedPrefix + hex: a reader
	Permit                // SemPrefix + hex: a semaphore's permit
)

// kinds is what each kind is: its token prefix and the calls of its
// scripts (and so its keys: the lock hash for a lock, the sem keys for a
// permit). Only an exclusive release may withdraw one attempt of a Redlock
// ('w'; a Redlock takes exclusive locks only). Adding a kind is an entry
// here, its scripts, and the checklist in docs/design.md.
var kinds = [...]struct {
	prefix  string
	acquire func(Keys, string, AcquireArgs) Call
	refresh func(Keys, string, time.Duration) Call
	release func(Keys, string, ReleaseArgs) Call
	pttl    func(Keys, string) Call
}{
	Exclusive: {"", lockAcquire(scripts.Acquire), lockRefresh(scripts.Refresh), lockRelease(scripts.Release, true), lockPTTL(scripts.PTTL)},
	Shared: {SharedPrefix, lockAcquire(scripts.AcquireShared), lockRefresh(scripts.RefreshShared),
		lockRelease(scripts.ReleaseShared, false), lockPTTL(scripts.PTTLShared)},
	Permit: {SemPrefix, semAcquire, semRefresh, semRelease, semPTTL},
}

// KindOf returns the kind of token, by its prefix.
func KindOf(token string) Kind {
	for k := Shared; int(k) < len(kinds); k++ {
		if strings.HasPrefix(token, kinds[k].prefix) {
			return k
		}
	}
	return Exclusive
}

// Prefix is the kind's token prefix ("" for exclusive tokens).
func (k Kind) Prefix() string { return kinds[k].prefix }

// ms is d in whole ms as a call's argument. Boxing an int64 above 255
// costs an allocation, and most durations a call sends are a Client's
// settings, the same on every call (the TTL, the queue's, the fence's and
// the record's lifetimes): msArgs keeps them boxed.
func ms(d time.Duration) any {
	m := d.Milliseconds()
	if m >= 0 && m < 256 {
		return m // the runtime boxes these without allocating
	}
	return msArgs.box(m)
}

var msArgs boxes

// boxes holds the interface values of the last few distinct arguments
// boxed (boxesMax), so that a value sent again costs no allocation. Reads
// take no lock: the set is a slice replaced whole on a miss. Two misses at
// once may each drop the other's value, which the next call boxes again.
type boxes struct {
	set atomic.Pointer[[]boxed]
}

type boxed struct {
	v   int64
	arg any // v, boxed
}

// boxesMax bounds a set: a few Clients' settings fit, and a value that
// changes on every call (a TTL computed per acquisition) costs a copy of
// the set (16 × 24 bytes) on each miss, not a growing one.
const boxesMax = 16

func (b *boxes) box(v int64) any {
	if set := b.set.Load(); set != nil {
		for i := range *set {
			if (*set)[i].v == v {
				return (*set)[i].arg
			}
		}
	}
	arg := any(v)
	var set []boxed
	if old := b.set.Load(); old != nil {
		set = *old
	}
	if len(set) >= boxesMax {
		set = set[1:] // the oldest goes
	}
	set = append(slices.Clip(set), boxed{v: v, arg: arg})
	b.set.Store(&set)
	return arg
}

// flag is b as a call's argument, "1" or "0". The arguments that are
// always one of a few texts are boxed once (argOne and the others): a
// string chosen at run time costs an allocation to box, even a constant.
func flag(b bool) any {
	if b {
		return argOne
	}
	return argZero
}

var argOne, argZero, argForced, argWithdraw any = "1", "0", "f", "w"
