package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/node"
)

// sentinelClient returns a client for one Sentinel, with the connection's
// TLS and timeouts; Sentinels take no data-node password here.
func (d *doctorRun) sentinelClient(addr string) *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{MaintNotificationsConfig: noMaintNotifications(),
		Addr: addr, TLSConfig: d.uo.TLSConfig, Username: d.uo.SentinelUsername, Password: d.uo.SentinelPassword,
		DialTimeout: d.uo.DialTimeout, ReadTimeout: d.uo.ReadTimeout, WriteTimeout: d.uo.WriteTimeout,
		ContextTimeoutEnabled: true, MaxRetries: -1, Dialer: d.uo.Dialer,
	})
}

func (d *doctorRun) sentinelPrimary(s *redis.SentinelClient) (string, error) {
	got, err := s.GetMasterAddrByName(d.ctx, d.uo.MasterName).Result()
	if err != nil {
		return "", err
	}
	if len(got) != 2 {
		return "", fmt.Errorf("answer %q", got)
	}
	return got[0] + ":" + got[1], nil
}

// checkSentinels asks each Sentinel for the primary and SENTINEL CKQUORUM.
func (d *doctorRun) checkSentinels() {
	name := d.uo.MasterName
	primaries := map[string]bool{}
	reached := 0
	for _, addr := range d.uo.Addrs {
		s := d.sentinelClient(addr)
		primary, err := d.sentinelPrimary(s)
		if err != nil {
			st := statusWarn // one Sentinel down is what quorum is for
			if !isNetErr(err) {
				st = statusFail
			}
			d.add("sentinel", st, addr, fmt.Sprintf("does not name the primary of %q: %v", name, err),
				"check that this Sentinel runs and monitors "+name+" (SENTINEL MASTERS)")
			_ = s.Close()
			continue
		}
		reached++
		primaries[primary] = true
		q, err := s.CkQuorum(d.ctx, name).Result()
		_ = s.Close()
		if err != nil {
			d.add("sentinel", statusFail, addr, fmt.Sprintf("primary %s, but SENTINEL CKQUORUM %s: %v", primary, name, err),
				"start enough Sentinels that they reach the quorum and a majority: without it no failover happens")
			continue
		}
		d.add("sentinel", statusOK, addr, fmt.Sprintf("primary %s; %s", primary, q), "")
	}
	switch {
	case reached == 0:
		d.add("sentinel", statusFail, "", fmt.Sprintf("no Sentinel of %d answered for %q", len(d.uo.Addrs), name), "check the --addr values and --master-name")
	case len(primaries) > 1:
		d.add("sentinel", statusFail, "", fmt.Sprintf("the Sentinels name different primaries: %v (a failover under way, or a split)", slices.Sorted(maps.Keys(primaries))),
			"run again in a minute; if it stays, check SENTINEL MASTERS on each")
	}
}

// isNetErr tells a Sentinel that did not answer from one that refused.
func isNetErr(err error) bool {
	var re redis.Error
	return !errors.As(err, &re)
}

// checkClusterNode reads CLUSTER INFO on one primary.
func (d *doctorRun) checkClusterNode(n dataNode) {
	raw, err := n.rdb.ClusterInfo(d.ctx).Result()
	if err != nil {
		d.add("cluster", statusWarn, n.addr, "cannot read CLUSTER INFO ("+cannotRead(err)+")", "")
		return
	}
	info := map[string]string{}
	for line := range strings.Lines(raw) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			info[k] = v
		}
	}
	state, assigned, served := info["cluster_state"], info["cluster_slots_assigned"], info["cluster_slots_ok"]
	msg := fmt.Sprintf("cluster_state %s, %s of 16384 slots assigned, %s served, %s nodes known", state, assigned, served, info["cluster_known_nodes"])
	if state != "ok" || assigned != "16384" || served != "16384" {
		d.add("cluster", statusFail, n.addr, msg+": locks whose slot is not served cannot be taken or renewed",
			"redis-cli --cluster check "+n.addr+" (then --cluster fix)")
		return
	}
	d.add("cluster", statusOK, n.addr, msg, "")
}

// checkClient states the go-redis settings that matter for locks: what
// this command uses, and what services should.
func (d *doctorRun) checkClient() {
	msg := fmt.Sprintf("this command connects with ContextTimeoutEnabled true and --timeout %v for dial, read and write. In services: ContextTimeoutEnabled: true (without it go-redis ignores a context's deadline on reads, so a call on a dead connection waits for ReadTimeout whatever its deadline; the lock's own deadline timer does not depend on it)", d.a.conn.timeout)
	if d.cluster != nil {
		msg += "; ClusterStateReloadInterval of a few seconds (go-redis' default 60s: after a failover the client keeps dialing the dead primary until then, and renewals of its locks fail)"
	}
	d.add("go-redis", statusOK, "", msg, "")
}

// latencyWarn is the p99 above which the lease deserves a second look: a
// renewal is a round trip, due every third of the TTL.
const latencyWarn = 50 * time.Millisecond

// checkLatency measures PING round trips to one primary.
func (d *doctorRun) checkLatency(n dataNode) {
	rtts := make([]time.Duration, 0, d.o.pings)
	for range d.o.pings {
		start := time.Now()
		if err := n.rdb.Ping(d.ctx).Err(); err != nil {
			d.add("latency", statusFail, n.addr, fmt.Sprintf("PING failed after %d answered: %v", len(rtts), err), "")
			return
		}
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	p50, p99 := rtts[len(rtts)/2], rtts[(len(rtts)*99+99)/100-1]
	msg := fmt.Sprintf("p50 %v, p99 %v, max %v over %d PINGs", roundMicro(p50), roundMicro(p99), roundMicro(rtts[len(rtts)-1]), len(rtts))
	switch {
	case p99 > d.a.conn.timeout/2:
		d.add("latency", statusFail, n.addr, msg+": close to --timeout", "find why Redis answers so slowly (SLOWLOG, LATENCY DOCTOR), or raise timeouts and TTLs")
	case p99 > latencyWarn:
		d.add("latency", statusWarn, n.addr, msg+fmt.Sprintf(": renewals are round trips due every third of a TTL; keep TTLs well above %v", 100*p99),
			"put Redis closer to its clients, or use long TTLs")
	default:
		d.add("latency", statusOK, n.addr, msg, "")
	}
}

func roundMicro(d time.Duration) time.Duration { return d.Round(time.Microsecond) }

// skewWarn is the clock difference between data nodes above which doctor
// warns: a fence restarted from a clock that far behind may repeat fences
// handed out within that time.
const skewWarn = 100 * time.Millisecond

// checkSkew compares TIME on every primary and the replicas they announce.
// Each reading is set against the local clock at the middle of its round
// trip, so the error of a pair is at most half of the two round trips.
func (d *doctorRun) checkSkew(nodes []dataNode) {
	type reading struct {
		addr   string
		offset time.Duration // server clock minus local clock
		rtt    time.Duration
	}
	var rs []reading
	read := func(addr string, rdb redis.Cmdable) error {
		start := time.Now()
		t, err := rdb.Time(d.ctx).Result()
		if err != nil {
			return err
		}
		rtt := time.Since(start)
		rs = append(rs, reading{addr: addr, offset: t.Sub(start.Add(rtt / 2)), rtt: rtt})
		return nil
	}
	for _, n := range nodes {
		if err := read(n.addr, n.rdb); err != nil {
			d.add("clock-skew", statusWarn, n.addr, "cannot read TIME: "+err.Error(), "")
		}
	}
	for _, addr := range d.replicas {
		o := d.uo.Simple()
		o.Addr, o.MaxRetries = addr, -1
		c := redis.NewClient(o)
		if err := read(addr, c); err != nil {
			d.add("clock-skew", statusWarn, addr, "cannot read TIME on this replica (as its primary announces it): "+err.Error(),
				"compare its clock by hand: a promoted replica whose clock is behind can repeat fences")
		}
		_ = c.Close()
	}
	if len(rs) < 2 {
		return // nothing to compare: a lone server's fences follow its own clock
	}
	lo, hi, maxRTT := rs[0], rs[0], time.Duration(0)
	for _, r := range rs {
		if r.offset < lo.offset {
			lo = r
		}
		if r.offset > hi.offset {
			hi = r
		}
		maxRTT = max(maxRTT, r.rtt)
	}
	skew := hi.offset - lo.offset
	msg := fmt.Sprintf("%d nodes; largest difference %v (%s ahead of %s), ± %v", len(rs), roundMicro(skew), hi.addr, lo.addr, roundMicro(maxRTT))
	if skew > skewWarn+maxRTT {
		d.add("clock-skew", statusWarn, "", msg+": when a fence counter is lost (restart, failover, a slot moved after the counter expired), the node that takes over restarts fences from its own clock, and one that far behind can hand out fences below ones already handed out; lock ages also differ by node",
			"run NTP (chrony) on every Redis host")
		return
	}
	d.add("clock-skew", statusOK, "", msg, "")
}

// checkLocks counts dlock's keys under the prefix on each primary, with a
// bounded SCAN: never KEYS, and never the whole keyspace of a big server.
func (d *doctorRun) checkLocks(nodes []dataNode) {
	prefix := d.a.conn.prefix
	var held, sems, queues, fences, seen int
	capped := false
	for _, n := range nodes {
		var cursor uint64
		looked := 0
		for {
			keys, next, err := n.rdb.Scan(d.ctx, cursor, node.Match(prefix, "*"), 1000).Result()
			if err != nil {
				d.add("locks", statusWarn, n.addr, "cannot SCAN: "+err.Error(), "")
				return
			}
			for _, k := range keys {
				switch _, kind := node.ParseKey(prefix, k); kind {
				case node.KeyLock:
					held++
				case node.KeySem:
					sems++
				case node.KeyQueue:
					queues++
				case node.KeyFence:
					fences++
				}
			}
			seen += len(keys)
			looked += 1000
			cursor = next
			if cursor == 0 {
				break
			}
			if looked >= d.o.scanLimit {
				capped = true
				break
			}
		}
	}
	atLeast := ""
	if capped {
		atLeast = "at least "
	}
	msg := fmt.Sprintf("%s%d lock(s) held, %d semaphore(s) with permits out, %d name(s) with waiters, %d fence counter(s) under prefix %q", atLeast, held, sems, queues, fences, prefix)
	if capped {
		d.add("locks", statusWarn, "", msg+fmt.Sprintf(": stopped after looking at about %d keys per primary", d.o.scanLimit), "raise --scan-limit to count them all")
		return
	}
	d.add("locks", statusOK, "", msg, "")
}
