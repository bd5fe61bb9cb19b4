package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9/maintnotifications"
)

func TestConnOptions(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	prompt := func() (string, error) { return "typed", nil }
	tests := []struct {
		name     string
		flags    connFlags
		env      map[string]string
		addrs    []string
		master   string
		cluster  bool
		user, pw string
		tls      bool
		usage    bool
	}{
		{name: "default", addrs: []string{defaultAddr}},
		{name: "one addr", flags: connFlags{addrs: []string{"h:1"}}, addrs: []string{"h:1"}},
		{name: "cluster by count", flags: connFlags{addrs: []string{"h:1", "h:2"}}, addrs: []string{"h:1", "h:2"}},
		{name: "cluster by flag", flags: connFlags{addrs: []string{"h:1"}, cluster: true}, addrs: []string{"h:1"}, cluster: true},
		{name: "sentinel", flags: connFlags{addrs: []string{"s:1", "s:2"}, masterName: "m"}, addrs: []string{"s:1", "s:2"}, master: "m"},
		{name: "url", flags: connFlags{url: "redis://u:p@h:7/2"}, addrs: []string{"h:7"}, user: "u", pw: "p"},
		{name: "rediss", flags: connFlags{url: "rediss://h:7"}, addrs: []string{"h:7"}, tls: true},
		{name: "DLOCK_URL before REDIS_URL", env: map[string]string{"DLOCK_URL": "redis://a:1", "REDIS_URL": "redis://b:1"}, addrs: []string{"a:1"}},
		{name: "REDIS_URL", env: map[string]string{"REDIS_URL": "redis://b:1"}, addrs: []string{"b:1"}},
		{name: "--addr over env", flags: connFlags{addrs: []string{"h:1"}}, env: map[string]string{"DLOCK_URL": "redis://a:1"}, addrs: []string{"h:1"}},
		{name: "password from env", env: map[string]string{"REDISCLI_AUTH": "r", "DLOCK_PASSWORD": "d"}, addrs: []string{defaultAddr}, pw: "d"},
		{name: "REDISCLI_AUTH", env: map[string]string{"REDISCLI_AUTH": "r"}, addrs: []string{defaultAddr}, pw: "r"},
		{name: "ask-pass", flags: connFlags{askPass: true, user: "me"}, env: map[string]string{"DLOCK_PASSWORD": "d"}, addrs: []string{defaultAddr}, user: "me", pw: "typed"},
		{name: "tls flag", flags: connFlags{tls: true, insecure: true}, addrs: []string{defaultAddr}, tls: true},
		{name: "url and addr", flags: connFlags{url: "redis://h:1", addrs: []string{"h:1"}}, usage: true},
		{name: "url and master", flags: connFlags{url: "redis://h:1", masterName: "m"}, usage: true},
		{name: "bad scheme", flags: connFlags{url: "http://h:1"}, usage: true},
		{name: "insecure without tls", flags: connFlags{insecure: true}, usage: true},
		{name: "cert without key", flags: connFlags{tls: true, cert: "c.pem"}, usage: true},
		{name: "missing cacert", flags: connFlags{tls: true, cacert: "/nonexistent.pem"}, usage: true},
		// redis-cli's habits.
		{name: "-h -p", flags: connFlags{host: "r1", port: 6380}, addrs: []string{"r1:6380"}},
		{name: "-h alone", flags: connFlags{host: "r1"}, addrs: []string{"r1:6379"}},
		{name: "-p alone", flags: connFlags{port: 6380}, addrs: []string{"127.0.0.1:6380"}},
		{name: "-h IPv6", flags: connFlags{host: "::1", port: 7}, addrs: []string{"[::1]:7"}},
		{name: "-h over env", flags: connFlags{host: "r1"}, env: map[string]string{"DLOCK_URL": "redis://a:1"}, addrs: []string{"r1:6379"}},
		{name: "-h and --addr", flags: connFlags{host: "r1", addrs: []string{"h:1"}}, usage: true},
		{name: "-p and --url", flags: connFlags{port: 1, url: "redis://h:1"}, usage: true},
		{name: "port out of range", flags: connFlags{port: 70000}, usage: true},
		{name: "-a refused", flags: connFlags{pass: "secret"}, usage: true},
		{name: "url host:port", flags: connFlags{url: "127.0.0.1:6390"}, addrs: []string{"127.0.0.1:6390"}},
		{name: "url host", flags: connFlags{url: "redis.internal"}, addrs: []string{"redis.internal:6379"}},
		{name: "url [v6]:port", flags: connFlags{url: "[::1]:6390"}, addrs: []string{"[::1]:6390"}},
		{name: "env host:port", env: map[string]string{"DLOCK_URL": "10.0.0.5:6390"}, addrs: []string{"10.0.0.5:6390"}},
		{name: "url bad port", flags: connFlags{url: "h:port"}, usage: true},
		{name: "url host:port/db", flags: connFlags{url: "h:1/2"}, usage: true},
		{name: "url user@host", flags: connFlags{url: "u@h:1"}, usage: true},
		{name: "url db and --db differ", flags: connFlags{url: "redis://h:1/2", db: dbFlag{3, true}}, usage: true},
		{name: "db on a cluster", flags: connFlags{addrs: []string{"h:1", "h:2"}, db: dbFlag{3, true}}, usage: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env = tt.env
			f := tt.flags
			f.timeout = time.Second
			o, err := f.options(getenv, prompt)
			var ue *usageError
			if tt.usage {
				if !errors.As(err, &ue) {
					t.Fatalf("got %v, want a usage error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(o.Addrs, tt.addrs) || o.MasterName != tt.master || o.IsClusterMode != tt.cluster ||
				o.Username != tt.user || o.Password != tt.pw || (o.TLSConfig != nil) != tt.tls {
				t.Errorf("got addrs %v master %q cluster %v user %q password %q tls %v",
					o.Addrs, o.MasterName, o.IsClusterMode, o.Username, o.Password, o.TLSConfig != nil)
			}
			if !o.ContextTimeoutEnabled || o.ReadTimeout != time.Second {
				t.Errorf("ContextTimeoutEnabled %v, ReadTimeout %v", o.ContextTimeoutEnabled, o.ReadTimeout)
			}
			// Redis 7 and Valkey refuse CLIENT MAINT_NOTIFICATIONS, which
			// go-redis sends on every connection unless told not to.
			if m := o.MaintNotificationsConfig; m == nil || m.Mode != maintnotifications.ModeDisabled {
				t.Errorf("maintenance notifications %+v, want disabled", m)
			}
		})
	}
}

func TestConnDB(t *testing.T) {
	getenv := func(string) string { return "" }
	for _, tt := range []struct {
		flags connFlags
		want  int
	}{
		{connFlags{db: dbFlag{3, true}}, 3},
		{connFlags{url: "redis://h:1/2"}, 2},
		{connFlags{url: "redis://h:1/2", db: dbFlag{2, true}}, 2},
		{connFlags{url: "h:1", db: dbFlag{4, true}}, 4},
		{connFlags{host: "h", db: dbFlag{5, true}}, 5},
	} {
		f := tt.flags
		f.timeout = time.Second
		o, err := f.options(getenv, nil)
		if err != nil || o.DB != tt.want {
			t.Errorf("%+v: db %v, err %v; want db %d", tt.flags, o.DB, err, tt.want)
		}
	}
}

// From the review: a socket path is dialed as written ('#' and '%' are not
// URL syntax there), --tls with a socket is refused rather than ignored,
// -h takes [::1] as redis-cli users write it, and -h host:port says how to
// give a port.
func TestConnSocketPathsAndHostForms(t *testing.T) {
	getenv := func(string) string { return "" }
	f := connFlags{url: "/tmp/rev#x.sock", timeout: time.Second}
	o, err := f.options(getenv, nil)
	if err != nil || len(o.Addrs) != 1 || o.Addrs[0] != "/tmp/rev#x.sock" || o.Dialer == nil {
		t.Errorf("--url /tmp/rev#x.sock: %v, %+v", err, o)
	}
	f = connFlags{url: "/tmp/r.sock", tls: true, timeout: time.Second}
	if _, err := f.options(getenv, nil); err == nil || !strings.Contains(err.Error(), "--tls") {
		t.Errorf("--tls with a socket: %v, want a refusal naming --tls", err)
	}
	f = connFlags{host: "[::1]", timeout: time.Second}
	if o, err := f.options(getenv, nil); err != nil || o.Addrs[0] != "[::1]:6379" {
		t.Errorf("-h [::1]: %v, %v", err, o)
	}
	f = connFlags{host: "127.0.0.1:6380", timeout: time.Second}
	if _, err := f.options(getenv, nil); err == nil || !strings.Contains(err.Error(), "-p") {
		t.Errorf("-h 127.0.0.1:6380: %v, want a hint about -p", err)
	}
}
