// Package scripts holds dlock's Lua scripts. Each is a .lua file embedded at
// build time and wrapped once in a redis.Script, which runs it by SHA
// (EVALSHA) and falls back to sending the source when the server answers
// NOSCRIPT, for example after SCRIPT FLUSH or a restart.
//
// Scripts that grant or extend a lock start with common.lua, so acquiring,
// refreshing and handing over write a lock the same way.
//
// Every script touches only keys that share one hash tag, so it runs on a
// single Cluster slot.
package scripts

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed common.lua
	commonSrc string
	//go:embed acquire.lua
	acquireSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed refresh.lua
	refreshSrc string
	//go:embed pttl.lua
	pttlSrc string
	//go:embed acquire_shared.lua
	acquireSharedSrc string
	//go:embed release_shared.lua
	releaseSharedSrc string
	//go:embed refresh_shared.lua
	refreshSharedSrc string
	//go:embed pttl_shared.lua
	pttlSharedSrc string

	//go:embed sem_common.lua
	semCommonSrc string
	//go:embed sem_acquire.lua
	semAcquireSrc string
	//go:embed sem_release.lua
	semReleaseSrc string
	//go:embed sem_refresh.lua
	semRefreshSrc string
	//go:embed sem_pttl.lua
	semPTTLSrc string
)

// The scripts. Their contracts (keys, arguments, replies) are at the top of
// each .lua file.
var (
	Acquire = redis.NewScript(link(commonSrc, acquireSrc))
	Release = redis.NewScript(link(commonSrc, releaseSrc))
	Refresh = redis.NewScript(link(commonSrc, refreshSrc))
	PTTL    = redis.NewScript(pttlSrc)

	// A reader's (read-write locks): chosen by its token's prefix.
	AcquireShared = redis.NewScript(link(commonSrc, acquireSharedSrc))
	ReleaseShared = redis.NewScript(link(commonSrc, releaseSharedSrc))
	RefreshShared = redis.NewScript(link(commonSrc, refreshSharedSrc))
	PTTLShared    = redis.NewScript(link(commonSrc, pttlSharedSrc))

	// The semaphore's (WithPermits): their own keys, apart from the lock hash.
	SemAcquire = redis.NewScript(link(commonSrc+semCommonSrc, semAcquireSrc))
	SemRelease = redis.NewScript(link(commonSrc+semCommonSrc, semReleaseSrc))
	SemRefresh = redis.NewScript(link(commonSrc+semCommonSrc, semRefreshSrc))
	SemPTTL    = redis.NewScript(semPTTLSrc)
)
