package main

import (
	"context"
	"fmt"
	"strings"

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
				return usageError{fmt.Errorf("--manifest-version %d: want %d to %d", version, discovery.MinVersion, discovery.MaxVersion)}
			}
			cfg, err := loadConfig(configPath, "")
			if err != nil {
				return err
			}
			cfg.ForManifest()
			b, err := bridge.New(cfg, bridge.Options{Logger: log})
			if err != nil {
				return err
			}
			defer func() { _ = b.Close(context.Background()) }()
			m := b.Manifest()
			if private := discovery.PrivateDropped(m, version); len(private) > 0 {
				// The endpoint refuses to serve this manifest; printing it
				// would show a configuration restate-server never gets.
				return usageError{fmt.Errorf("--manifest-version %d cannot keep %s private to the ingress (ingress_private needs manifest version 3 or newer), and the bridge refuses to serve such a manifest", version, strings.Join(private, ", "))}
			}
			out, err := discovery.Encode(m, version)
			if err != nil {
				return fmt.Errorf("--manifest-version %d: %w", version, err)
			}
			if dropped := discovery.DroppedFields(m, version); len(dropped) > 0 {
				log.Warn().Strs("dropped", dropped).Msgf("manifest version %d cannot carry these settings; a runtime given it will not apply them", version)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), string(out))
			return err
		},
	}
	addConfigFlag(cmd, &configPath)
	cmd.Flags().IntVar(&version, "manifest-version", 4, "endpoint manifest version (1-4)")
	return cmd
}
