// Command withredis runs a command next to a throwaway redis-server: it starts
// one on a free loopback port, runs the command with REDIS_ADDR set to it,
// stops the server and exits with the command's exit code. `make demo` uses
// it so the demo never touches a Redis the user already runs.
//
// Usage: go run ./internal/cmd/withredis -- COMMAND [ARGS...]
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/dlock-go/dlock/internal/redistest"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: withredis -- COMMAND [ARGS...]")
		return 2
	}
	dir, err := os.MkdirTemp("", "withredis-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "withredis:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	srv, err := redistest.Launch(context.Background(), dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "withredis:", err)
		return 1
	}
	defer srv.Kill()
	fmt.Fprintf(os.Stderr, "withredis: redis-server on %s (stopped when the command ends)\n", srv.Addr)

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "REDIS_ADDR="+srv.Addr)
	// Ctrl-C reaches the child through the terminal's process group; keep
	// this process alive until the child is gone, so the server is stopped.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM)
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode()
	case err != nil:
		fmt.Fprintln(os.Stderr, "withredis:", err)
		return 1
	}
	return 0
}
