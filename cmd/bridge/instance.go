package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/fnbridge/fnbridge/bridge"
)

// addInstanceFlag registers --instance on a command that serves.
func addInstanceFlag(cmd *cobra.Command, instance *string) {
	cmd.Flags().StringVar(instance, "instance", "", "this replica's identity, part of every run UID (overrides "+bridge.InstanceEnv+" and the file's instance; default: the hostname)")
}

// applyInstance gives the replica identity its precedence: --instance,
// then FNBRIDGE_INSTANCE, then the file's instance:, then the hostname
// (which the loaded configuration already holds). An empty variable counts
// as unset, as an empty field of the file does.
func applyInstance(cfg *bridge.Config, flag string) error {
	return applyOverride(flag, bridge.InstanceFromFlag, bridge.InstanceEnv, bridge.InstanceFromEnv, cfg.SetInstance)
}

// applyOverride gives a setting the precedence flag, then the environment
// variable env, then the file (which the loaded configuration already
// holds): set receives the first of flag and env's value that is not
// empty, with its source (fromFlag or fromEnv). An empty value counts as
// unset.
func applyOverride(flag, fromFlag, env, fromEnv string, set func(raw, source string) error) error {
	if flag != "" {
		return set(flag, fromFlag)
	}
	if v := os.Getenv(env); v != "" {
		return set(v, fromEnv)
	}
	return nil
}

// addContextListenFlag registers --context-listen on a command that
// serves.
func addContextListenFlag(cmd *cobra.Command, contextListen *string) {
	cmd.Flags().StringVar(contextListen, "context-listen", "", "context endpoint of durability: steps handlers, unix:///abs/path or host:port (overrides "+bridge.ContextListenEnv+" and the file's context_listen)")
}

// applyContextListen gives context_listen the instance identity's
// precedence (applyInstance): --context-listen, then
// FNBRIDGE_CONTEXT_LISTEN, then the file's context_listen (which the
// loaded configuration already holds). An empty variable counts as unset.
func applyContextListen(cfg *bridge.Config, flag string) error {
	return applyOverride(flag, bridge.ContextListenFromFlag, bridge.ContextListenEnv, bridge.ContextListenFromEnv, cfg.SetContextListen)
}
