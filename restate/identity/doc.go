// Package identity owns Restate request identity, scheme v1: the proof that
// a request reaching the endpoint was sent by a restate-server holding one of
// the configured ed25519 private keys.
//
// A signing server adds two headers to every discovery and invocation
// request:
//
//	x-restate-signature-scheme: v1
//	x-restate-jwt-v1: <JWT>
//
// The JWT is signed with EdDSA (ed25519), names the signing key in its "kid"
// header as "publickeyv1_" + base58(public key), and carries the claims aud
// (the request path), nbf, iat and exp. A server without a signing key sends
// neither header (or scheme "unsigned").
//
// The endpoint is configured with public keys in the same "publickeyv1_…"
// form ([ParseKey]); [Verifier.Verify] accepts a request only when its JWT
// verifies with one of them, is meant for this path and is within its
// validity window. With no keys configured there is nothing to verify
// against and every request is accepted (a nil *Verifier).
package identity
