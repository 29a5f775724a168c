// Package bridge joins the two halves of fnbridge: it loads the YAML
// configuration, keeps a pool of warm FunctionRuntime registrations per
// handler (lease, grow, idle-unregister, re-register), translates each
// Restate invocation into FunctionRuntime calls, and classifies
// FunctionRuntime errors into Restate's terminal and retryable failures.
//
// A handler with durability: function (the default) is one journaled
// Run("invoke") around InvokeFunction. With durability: steps there is no
// wrapping run: the bridge serves a stepctx endpoint (context_listen),
// opens an Attempt per invocation attempt, passes its address and token
// to the worker as InvokeFunction metadata (functionruntime.MetadataContext,
// functionruntime.MetadataContextToken) and turns each context call of the function into
// one operation of the invocation's restate.Context (restateJournal). The
// function's result is the Output; a wait longer than suspend_after
// suspends: the invocation is cancelled (the runtime kills its processes)
// and the registration released. `bridge invoke` runs such a function
// against a local journal held in memory (steps execute, a long wait
// suspends and a new attempt replays the journal, calls need Restate).
//
// It never parses frames (package restate does) nor spawns processes
// (the functionruntime adapters do).
package bridge
