package main

import (
	"errors"
	"slices"
	"testing"
	"time"
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
		})
	}
}
