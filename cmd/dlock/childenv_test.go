package main

import "testing"

func TestWithoutPassword(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"127.0.0.1:6379", "127.0.0.1:6379", true},
		{"redis://h:6379/2", "redis://h:6379/2", true},
		{"redis://:pw@h:6379/2", "redis://h:6379/2", true},
		{"redis://app:pw@h:6379", "redis://app@h:6379", true},
		{"redis://app@h:6379", "redis://app@h:6379", true},
		{"rediss://app:p%40ss@h:6380/1?skip_verify=true", "rediss://app@h:6380/1?skip_verify=true", true},
		{"unix://:pw@/run/redis.sock?db=3", "unix:///run/redis.sock?db=3", true},
		{"redis://:pw@h:bad port", "", false}, // does not parse: dropped, not passed with its password
	} {
		got, ok := withoutPassword(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("withoutPassword(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
