package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock/internal/serverreq"
)

// checkVersion names the server (Redis, Valkey) and checks its own
// version against the oldest of its kind dlock works with, and, in a
// Cluster, that it has the shard channels, as the library does (by COMMAND
// INFO; by Redis' version when the server refused to say).
func (d *doctorRun) checkVersion(n dataNode, f nodeFacts) {
	s := serverreq.Identify(func(k string) string { return f.info[k] })
	need := s.Need()
	v, ok := serverreq.Parse(s.Version)
	cluster := d.cluster != nil
	minC := serverreq.MinCluster
	switch {
	case s.Version == "":
		d.add("version", statusWarn, n.addr, "cannot read the server's version ("+cannotRead(f.infoErr)+"); "+need.Text(s),
			"allow INFO to the user dlock connects as, or check the version with the provider")
	case !ok:
		d.add("version", statusWarn, n.addr, fmt.Sprintf("%s: %q is not a version dlock can compare; %s", s.Name, s.Version, need.Text(s)), "")
	case serverreq.Older(v, need.Min):
		d.add("version", statusFail, n.addr, fmt.Sprintf("%s; %s (%s)", s, need.Text(s), need.Why),
			fmt.Sprintf("upgrade %s to %d.%d or newer", s.Name, need.Min[0], need.Min[1]))
	case cluster && f.shard != nil && !*f.shard:
		d.add("version", statusFail, n.addr, fmt.Sprintf("%s has no SPUBLISH (COMMAND INFO); a Cluster needs it (%s)", s, serverreq.WhyMinCluster),
			fmt.Sprintf("upgrade to Redis %d.%d or newer, or to Valkey", minC[0], minC[1]))
	case cluster && f.shard == nil && s.Name == "Redis" && serverreq.Older(v, minC):
		d.add("version", statusFail, n.addr, fmt.Sprintf("%s; a Redis Cluster needs Redis %d.%d or newer (%s)", s, minC[0], minC[1], serverreq.WhyMinCluster),
			fmt.Sprintf("upgrade Redis to %d.%d or newer", minC[0], minC[1]))
	case cluster:
		d.add("version", statusOK, n.addr, fmt.Sprintf("%s; %s, with the shard channels a Cluster needs", s, need.Text(s)), "")
	default:
		d.add("version", statusOK, n.addr, fmt.Sprintf("%s; %s", s, need.Text(s)), "")
	}
}

// cannotRead says why a setting could not be read.
func cannotRead(err error) string {
	if err == nil {
		return "not shown"
	}
	return "refused: " + strings.TrimSpace(err.Error())
}

// checkEviction fails every maxmemory-policy but noeviction, with the
// library's own reason (serverreq.EvictionRisk).
func (d *doctorRun) checkEviction(n dataNode, f nodeFacts) {
	policy, ok := f.config["maxmemory-policy"]
	if !ok {
		// Managed Redis often refuses CONFIG but shows the policy in INFO.
		policy, ok = f.info["maxmemory_policy"]
	}
	if !ok {
		d.add("maxmemory-policy", statusWarn, n.addr, "cannot read maxmemory-policy (CONFIG GET "+cannotRead(f.confErr["maxmemory-policy"])+"; not in INFO memory either)",
			"make sure it is noeviction (redis.conf or the provider's parameter group): any other policy may evict held locks")
		return
	}
	risk, risky := serverreq.EvictionRisk(policy)
	if !risky {
		d.add("maxmemory-policy", statusOK, n.addr, "noeviction: a full Redis refuses writes, so acquisitions fail loudly rather than a held lock being evicted", "")
		return
	}
	msg, fix, _ := strings.Cut(risk, ". Run ")
	if mm := f.config["maxmemory"]; mm == "0" {
		msg += " (maxmemory is 0 now, so nothing is evicted until a limit is set; managed Redis sets one)"
	}
	d.add("maxmemory-policy", statusFail, n.addr, msg, fix)
}

const restartFix = "CONFIG SET appendonly yes and CONFIG SET appendfsync always (and in redis.conf); or, after a crash, keep Redis from serving locks for the longest lock TTL (a delayed restart)"

// fenceAfterRestart is what a lost fence counter does, from common.lua's
// next_fence: the next fence is at least the server's clock in µs.
const fenceAfterRestart = "fences keep growing (a lost counter restarts from the server's clock in µs) as long as the server's clock does not go back"

// checkDurable says whether dlock.WithDurableGrant works on the server:
// it needs WAITAOF (asked of COMMAND INFO) and AOF on. Informational: the
// persistence check warns of what a restart loses without it.
func (d *doctorRun) checkDurable(n dataNode, f nodeFacts) {
	s := serverreq.Identify(func(k string) string { return f.info[k] })
	aof := f.config["appendonly"]
	if aof == "" {
		aof = map[string]string{"1": "yes", "0": "no"}[f.info["aof_enabled"]]
	}
	fsync := f.config["appendfsync"]
	var msg string
	switch {
	case f.waitAOF == nil:
		msg = "cannot tell whether the server has WAITAOF (COMMAND INFO refused): dlock.WithDurableGrant is refused"
	case !*f.waitAOF:
		msg = fmt.Sprintf("%s has no WAITAOF: dlock.WithDurableGrant is refused (Redis 7.2 or newer, or Valkey, has it); appendfsync always is what keeps grants across a crash here", s)
	case aof == "no":
		msg = "WAITAOF, but AOF off: the server refuses dlock.WithDurableGrant's WAITAOF until appendonly is yes"
	case aof != "yes" || fsync == "":
		msg = "WAITAOF; AOF or appendfsync unknown (see persistence): dlock.WithDurableGrant is refused unless the server shows appendfsync"
	case fsync == "always":
		msg = "WAITAOF, AOF with appendfsync always: every grant is on disk before its reply; dlock.WithDurableGrant is accepted (and adds WAITAOF for replicas' disks with WithReplicas)"
	case fsync == "everysec" && serverreq.EarlyWaitAOF(s):
		msg = fmt.Sprintf("WAITAOF, AOF with appendfsync everysec, but %s answers WAITAOF before the fsync under everysec (the bug Redis 8.0 fixed, redis/redis#13793): dlock.WithDurableGrant is refused; appendfsync always keeps every grant", s)
	case fsync == "everysec":
		msg = "WAITAOF and AOF with appendfsync everysec: dlock.WithDurableGrant confirms each grant and renewal on disk (waiting for the next fsync, up to a second), which keeps those locks across a crash"
	default:
		msg = "WAITAOF, but appendfsync " + fsync + " never fsyncs on the server's schedule: dlock.WithDurableGrant is refused"
	}
	d.add("durable-grant", statusOK, n.addr, msg, "")
}

// checkPersistence says what a restart does to held locks and fences.
func (d *doctorRun) checkPersistence(n dataNode, f nodeFacts) {
	aof, ok := f.config["appendonly"]
	if !ok {
		aof, ok = f.info["aof_enabled"]
		aof = map[string]string{"1": "yes", "0": "no"}[aof]
	}
	if !ok || aof == "" {
		d.add("persistence", statusWarn, n.addr, "cannot read appendonly (CONFIG GET "+cannotRead(f.confErr["appendonly"])+"; not in INFO persistence either)",
			"check with the provider what a restart keeps: without AOF fsynced on every write, a restart frees locks their holders still work under")
		return
	}
	if aof != "yes" {
		snap := "no RDB snapshots either: a restart loses every lock"
		if s := f.config["save"]; s != "" {
			snap = fmt.Sprintf("RDB snapshots only (save %q): a restart loses every lock taken since the last snapshot", s)
		}
		d.add("persistence", statusWarn, n.addr,
			"no AOF, "+snap+"; a second client can then take a lock its holder still works under, until the holder's next renewal fails (a third of its TTL); "+fenceAfterRestart,
			restartFix)
		return
	}
	switch fsync, ok := f.config["appendfsync"]; {
	case !ok:
		d.add("persistence", statusWarn, n.addr, "AOF on, appendfsync unknown (CONFIG GET "+cannotRead(f.confErr["appendfsync"])+"): everysec would lose up to a second of lock grants in a crash",
			"make sure appendfsync is always")
	case fsync == "always":
		d.add("persistence", statusOK, n.addr, "AOF with appendfsync always: a restart keeps every lock and fence counter it acknowledged", "")
	default:
		lose := "up to a second of writes"
		if fsync == "no" {
			lose = "the writes the OS had not flushed (often up to 30 s)"
		}
		fix := restartFix
		if s := serverreq.Identify(func(k string) string { return f.info[k] }); fsync == "everysec" && f.waitAOF != nil && *f.waitAOF && !serverreq.EarlyWaitAOF(s) {
			fix += "; or keep everysec and acquire the locks that must survive a crash with dlock.WithDurableGrant (see durable-grant)"
		}
		d.add("persistence", statusWarn, n.addr,
			fmt.Sprintf("AOF with appendfsync %s: a crash of the machine loses %s, so a lock granted just before it is free after the restart while its holder works on; %s", fsync, lose, fenceAfterRestart),
			fix)
	}
}

// checkReplication checks the role and, on a primary with replicas,
// min-replicas-to-write; it also notes the replicas for checkSkew.
func (d *doctorRun) checkReplication(n dataNode, f nodeFacts) {
	role := f.info["role"]
	if role == "" {
		d.add("replication", statusWarn, n.addr, "cannot read the role (INFO replication "+cannotRead(f.infoErr)+")", "")
		return
	}
	if role != "master" {
		d.add("replication", statusFail, n.addr,
			fmt.Sprintf("this server is a replica of %s:%s: it refuses the writes of every lock operation (READONLY)", f.info["master_host"], f.info["master_port"]),
			"connect to the primary, or through Sentinel (--master-name with the Sentinels' --addr)")
		return
	}
	replicas, _ := strconv.Atoi(f.info["connected_slaves"])
	for i := range replicas {
		// slave0:ip=127.0.0.1,port=6380,state=online,offset=..,lag=0
		var ip, port string
		for kv := range strings.SplitSeq(f.info["slave"+strconv.Itoa(i)], ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "ip":
				ip = v
			case "port":
				port = v
			}
		}
		if ip != "" && port != "" {
			d.replicas = append(d.replicas, ip+":"+port)
		}
	}
	if replicas == 0 {
		if d.uo.MasterName != "" {
			d.add("replication", statusWarn, n.addr, "the primary has no replica connected: Sentinel has nothing to promote if it dies",
				"attach a replica (REPLICAOF on it)")
			return
		}
		d.add("replication", statusOK, n.addr, "primary without replicas: a failover cannot lose a lock grant; a crash is a restart (see persistence)", "")
		return
	}
	minW, ok := f.config["min-replicas-to-write"]
	if !ok {
		d.add("replication", statusWarn, n.addr,
			fmt.Sprintf("%d replica(s); cannot read min-replicas-to-write (CONFIG GET %s)", replicas, cannotRead(f.confErr["min-replicas-to-write"])),
			"make sure min-replicas-to-write is at least 1 on the primaries")
		return
	}
	w, _ := strconv.Atoi(minW)
	lag := f.config["min-replicas-max-lag"]
	switch {
	case w == 0:
		d.add("replication", statusWarn, n.addr,
			fmt.Sprintf("%d replica(s), min-replicas-to-write 0: replication is asynchronous, so a failover can promote a replica that missed a lock grant (two holders), and a primary cut off from the others keeps granting locks until it learns of the failover", replicas),
			"CONFIG SET min-replicas-to-write 1 and min-replicas-max-lag 10 or less on every primary (and in redis.conf); in services, dlock.WithReplicas(1, timeout) waits for a replica to acknowledge each grant")
	case w > replicas:
		d.add("replication", statusFail, n.addr,
			fmt.Sprintf("min-replicas-to-write %d but %d replica(s) connected: the primary refuses every write (NOREPLICAS), so every acquisition fails", w, replicas),
			"attach replicas, or lower min-replicas-to-write")
	default:
		d.add("replication", statusOK, n.addr,
			fmt.Sprintf("%d replica(s), min-replicas-to-write %d, min-replicas-max-lag %ss: a primary cut off from its replicas stops granting locks after that lag", replicas, w, lag), "")
	}
}
