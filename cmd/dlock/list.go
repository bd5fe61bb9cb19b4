package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock/inspect"
	"github.com/spf13/cobra"
)

func newListCmd(a *app) *cobra.Command {
	var (
		match, output string
		limit         int
	)
	cmd := &cobra.Command{
		Use:   "list [--match PATTERN] [-o text|json] [--limit N]",
		Short: "List the locks held now",
		Long: `List the locks held now, with their owner, token prefix, fencing token,
age, lease left and waiters. It walks the keyspace with SCAN (never KEYS), on
every primary of a Cluster, so it does not block Redis, but on a big keyspace
it takes a while. The whole token is never shown.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if limit < 0 {
				return usagef("--limit %d is negative", limit)
			}
			c, _, closeAll, err := a.locker()
			if err != nil {
				return err
			}
			defer closeAll()
			infos, err := c.List(cmd.Context(), match, limit)
			if err != nil {
				return err
			}
			slices.SortFunc(infos, func(x, y inspect.LockInfo) int { return strings.Compare(x.Name, y.Name) })
			now := time.Now()
			if output == "json" {
				views := make([]lockView, 0, len(infos))
				for _, i := range infos {
					views = append(views, viewOf(i, now))
				}
				return writeJSON(a.stdout, views)
			}
			if len(infos) == 0 {
				fmt.Fprintf(a.stderr, "no locks held matching %q under prefix %q\n", match, a.conn.prefix)
				return nil
			}
			return writeTable(a.stdout, infos, now)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&match, "match", "*", "glob pattern of the lock names (as Redis SCAN MATCH)")
	fs.StringVarP(&output, "output", "o", "text", "output format: text or json")
	fs.IntVar(&limit, "limit", 1000, "show at most N locks; 0 for all")
	return cmd
}
