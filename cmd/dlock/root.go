package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// deps is everything the commands take from the process. The command tree is
// built from it rather than from globals, so tests can run commands in the
// test process with their own output and environment.
type deps struct {
	// stdin is a file, not an io.Reader: run hands it to the child as it
	// is, and unlock and --ask-pass need to know whether it is a terminal.
	stdin   *os.File
	stdout  io.Writer
	stderr  io.Writer
	getenv  func(string) string
	environ func() []string        // the environment the child of run starts from
	self    func() (string, error) // this binary, re-executed by demo for its workers
}

func osDeps() deps {
	return deps{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr,
		getenv: os.Getenv, environ: os.Environ, self: os.Executable,
	}
}

// app is the state one invocation shares between the root and a subcommand:
// the connection flags and the code a busy lock exits with.
type app struct {
	deps
	conn     connFlags
	conflict int // exit code for a busy lock: run's -E, else exitConflict
	// noProbe: locker does not check that Redis answers first (serve,
	// which starts without it and says so on /readyz).
	noProbe bool
}

// execute runs the command line args and returns the exit code.
func execute(ctx context.Context, args []string, d deps) int {
	a := &app{deps: d, conflict: exitConflict}
	root := newRootCmd(a)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	path := ""
	if cmd != nil {
		path = cmd.CommandPath()
	}
	return report(d.stderr, err, a.conflict, path)
}

const rootLong = `dlock takes and inspects distributed locks kept in Redis, the same locks
the Go library github.com/dlock-go/dlock takes, from the shell.

  dlock run nightly-report -- ./report.sh      run a command under a lock
  dlock list                                   locks held now
  dlock inspect nightly-report                 who holds it, since when
  dlock unlock --force nightly-report          break a stuck lock (dangerous)
  dlock lock nightly-report                    take a lock, hold it until Ctrl-C
  dlock watch nightly-report                   follow its holder and its waiters
  dlock doctor                                 is this Redis fit to keep locks?
  dlock serve --listen 127.0.0.1:7480          admin page, JSON API, /metrics
  dlock demo                                   naive lock vs dlock, for real
  dlock torture -u redis://host:6379/15        dlock under faults, on your Redis

Connection (like redis-cli):
  -h/--host HOST, -p/--port PORT   as redis-cli (default 127.0.0.1 and 6379);
           help is --help only, -h being the host
  -u/--url redis://[user[:pass]@]host:port[/db], rediss:// for TLS, or
           host[:port] as redis-cli takes it; default $DLOCK_URL, then
           $REDIS_URL (either may be host:port too)
  --db N   the database number, redis-cli's -n (run's -n is flock's no-wait)
  --addr   host:port, repeatable: two or more (or --cluster) mean Redis
           Cluster; with --master-name they are Sentinels
  Without any, 127.0.0.1:6379. No -a: the password is never a flag (ps and
  shell history would show it); it is read from $DLOCK_PASSWORD, then
  $REDISCLI_AUTH (as redis-cli), or asked on the terminal with --ask-pass.
  A password in -u/--url works but shows in ps too: dlock warns; keep such a
  URL in $DLOCK_URL.

` + exitCodesHelp

func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "dlock",
		Short: "Distributed locks in Redis, from the shell",
		Long:  rootLong,
		// Errors are printed and mapped to exit codes in one place, execute.
		SilenceErrors: true,
		SilenceUsage:  true,
		// Arbitrary arguments reach RunE, which refuses them as a usage
		// error; cobra's own "unknown command" error would exit 3.
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				// A usage error, not the help and 0: a script that
				// called dlock without its command must not go on as if
				// it had worked.
				var names []string
				for _, c := range cmd.Commands() {
					if c.IsAvailableCommand() && c.Name() != "help" {
						names = append(names, c.Name())
					}
				}
				return usagef("no command given: dlock COMMAND [ARGS...], COMMAND one of %s", strings.Join(names, ", "))
			}
			msg := fmt.Sprintf("unknown command %q", args[0])
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += "; did you mean " + strings.Join(s, " or ") + "?"
			}
			return usagef("%s", msg)
		},
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: true},
		// SuggestionsFor does not apply cobra's default of 2 by itself.
		SuggestionsMinimumDistance: 2,
	}
	// --version (and -v): cobra prints Version through the template.
	root.Version = version()
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetHelpTemplate(helpTemplate)
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	// run stops reading flags at NAME, so a flag error is always about
	// dlock's own flags: no hint about "--".
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		if hint := connFlagHint(err); hint != "" {
			return usagef("%v (%s)", err, hint)
		}
		return &usageError{err: err}
	})
	a.conn.register(root.PersistentFlags())
	root.AddCommand(
		newRunCmd(a),
		newListCmd(a),
		newInspectCmd(a),
		newUnlockCmd(a),
		newServeCmd(a),
		newDemoCmd(a),
		newDemoWorkerCmd(a),
		newTortureCmd(a),
		newLockCmd(a),
		newWatchCmd(a),
		newDoctorCmd(a),
	)
	return root
}

// helpTemplate puts how to call a command first: the short line, usage,
// examples and flags, and the long explanation after them, for whoever
// reads on. Cobra's own puts Long first: 55 lines of run's prose came
// before its Usage. Every subcommand inherits it.
const helpTemplate = `{{with .Short}}{{.}}

{{end}}{{if or .Runnable .HasSubCommands}}{{.UsageString}}{{end}}{{with .Long}}
Description:

{{. | trimTrailingWhitespaces}}
{{end}}`

// exactArgs is cobra.ExactArgs returning a usage error.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s takes %s, got %d argument(s)", cmd.CommandPath(), what, len(args))
		}
		return nil
	}
}
