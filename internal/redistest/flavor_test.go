package redistest

import (
	"context"
	"strings"
	"testing"
)

// The server started is the one DLOCK_TEST_SERVER names: Valkey says so in
// INFO (server_name, valkey_version), Redis does not. A run meant for
// Valkey that quietly started redis-server would prove nothing about it.
func TestFlavorStartsItsServer(t *testing.T) {
	f, err := CurrentFlavor()
	if err != nil {
		t.Fatal(err)
	}
	info := Start(t).Client(t).Info(context.Background(), "server").Val()
	isValkey := strings.Contains(info, "valkey_version:")
	if isValkey != (f.Name == "valkey") {
		t.Fatalf("%s=%s started a server whose INFO says valkey_version: %v", FlavorEnv, f.Name, isValkey)
	}
	t.Logf("%s: %s", f.Name, firstLine(info, "valkey_version:", "redis_version:"))
}

func firstLine(info string, keys ...string) string {
	for _, k := range keys {
		for line := range strings.Lines(info) {
			if strings.HasPrefix(line, k) {
				return strings.TrimSpace(line)
			}
		}
	}
	return "?"
}
