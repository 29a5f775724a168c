// Package executorv1 is the Go code generated from function_runtime.proto
// (`make proto`): the FunctionRuntime gRPC contract between the bridge and
// a runtime server, as docs/spec/function-runtime-server-contract.md
// specifies it. This file is the only hand-written one here.
package executorv1
