package main

import (
	"time"

	"github.com/spf13/cobra"
)

func newInspectCmd(a *app) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "inspect NAME [-o text|json]",
		Short: "Show who holds a lock",
		Long: `Show who holds the lock NAME: owner, token prefix (never the whole token),
fencing token, how long it has been held, the lease left, and how many
clients wait for it. Exits 5 when nobody holds it.`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			c, _, closeAll, err := a.locker()
			if err != nil {
				return err
			}
			defer closeAll()
			info, err := c.Inspect(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(a.stdout, viewOf(info, time.Now()))
			}
			return writeDetail(a.stdout, info, time.Now())
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}
