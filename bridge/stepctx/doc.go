// Package stepctx is the channel between a function process and its
// invocation's durable context (placeholder doc; see below).
package stepctx
