package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/restate/discovery"
)

func newManifestCmd(g *globalFlags) *cobra.Command {
	var (
		configPath string
		version    int
	)
	cmd := &cobra.Command{
		Use:   "manifest",
		Short: "Print the Restate discovery manifest of the configuration",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			if version < discovery.MinVersion || version > discovery.MaxVersion {
				return fmt.Errorf("--manifest-version %d: want %d to %d", version, discovery.MinVersion, discovery.MaxVersion)
			}
			_, b, err := loadBridge(configPath, "", bridge.Options{Logger: log})
			if err != nil {
				return err
			}
			defer func() { _ = b.Close(context.Background()) }()
			out, err := discovery.Encode(b.Manifest(), version)
			if err != nil {
				return fmt.Errorf("--manifest-version %d: %w", version, err)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), string(out))
			return err
		},
	}
	addConfigFlag(cmd, &configPath)
	cmd.Flags().IntVar(&version, "manifest-version", 4, "endpoint manifest version (1-4)")
	return cmd
}
