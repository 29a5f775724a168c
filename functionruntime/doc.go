// Package functionruntime owns the FunctionRuntime side of fnbridge: the
// executor.v1.FunctionRuntime gRPC server (registration table, states,
// fencing, digests, bounds), its in-process client, and the Adapter
// interface that the built-in python and bash adapters implement. It knows
// nothing about Restate.
package functionruntime
