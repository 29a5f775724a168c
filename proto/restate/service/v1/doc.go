// Package servicev1 is the Go code generated from protocol.proto (`make
// proto`): the messages of Restate's service invocation protocol, versions
// 5 to 7, as docs/spec/restate-service-invocation-protocol.md specifies
// them. This file is the only hand-written one here.
package servicev1
