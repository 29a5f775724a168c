// Package wire owns the byte level of the Restate service invocation
// protocol: the 64-bit frame header, the message type table (type id, name,
// namespace and the generated proto message of every id), a streaming frame
// reader that enforces the message size limit before allocating, and frame
// encoding that appends to caller-owned buffers.
//
// It does no network I/O of its own: the reader consumes any io.Reader and
// the encoder appends to byte slices, so both the HTTP endpoint
// (package restate) and the pure journal state machine (package journal)
// can share one codec.
package wire
