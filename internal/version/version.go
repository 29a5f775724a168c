// Package version holds the fnbridge build version, reported by `bridge
// version` and in the x-restate-server header.
package version

// Version is the fnbridge release; the Makefile overrides it with
// -ldflags "-X github.com/fnbridge/fnbridge/internal/version.Version=...".
var Version = "0.2.0-dev"

// ServerHeader is the value of the x-restate-server response header.
func ServerHeader() string { return "fnbridge/" + Version }
