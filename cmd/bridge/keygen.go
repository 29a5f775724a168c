package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fnbridge/fnbridge/bridge"
)

func newKeygenCmd() *cobra.Command {
	var o bridge.KeygenOptions
	cmd := &cobra.Command{
		Use:   "keygen",
		Short: "Write a request-identity key pair: the private key for restate-server, the public key for identity_keys",
		Long: `keygen writes an ed25519 private key (PKCS#8 PEM, mode 0600) for restate-server to sign
its requests with (RESTATE_WORKER__INVOKER__REQUEST_IDENTITY_PRIVATE_KEY_PEM_FILE=FILE), writes the
matching publickeyv1_ key to FILE.pub and prints it on stdout: put it in the bridge's identity_keys
or pass the .pub file to bridge serve --identity-keys-file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Check(); err != nil {
				return usageError{err}
			}
			key, err := bridge.Keygen(o)
			if err != nil {
				return err
			}
			pub := o.PublicOut
			if pub == "" {
				pub = o.Out + ".pub"
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "private key: %s (restate-server: RESTATE_WORKER__INVOKER__REQUEST_IDENTITY_PRIVATE_KEY_PEM_FILE=%s)\npublic key:  %s (identity_keys, or bridge serve --identity-keys-file %s)\n", o.Out, o.Out, pub, pub)
			_, err = fmt.Fprintln(cmd.OutOrStdout(), key)
			return err
		},
	}
	cmd.Flags().StringVar(&o.Out, "out", "restate-identity.pem", "private key file to write")
	cmd.Flags().StringVar(&o.PublicOut, "public-out", "", "public key file to write (default: --out with .pub appended)")
	cmd.Flags().BoolVar(&o.Force, "force", false, "replace existing key files")
	cmd.Flags().BoolVar(&o.Reuse, "reuse", false, "keep an existing private key: (re)write and print its public key")
	return cmd
}
