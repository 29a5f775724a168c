package identity

import (
	"crypto/ed25519"
	"fmt"
	"strings"

	"github.com/mr-tron/base58"
)

// KeyPrefix starts every v1 public key string.
const KeyPrefix = "publickeyv1_"

// ParseKey decodes a public key written as "publickeyv1_" followed by the
// base58 encoding of the 32-byte ed25519 public key.
func ParseKey(s string) (ed25519.PublicKey, error) {
	rest, ok := strings.CutPrefix(s, KeyPrefix)
	if !ok {
		return nil, fmt.Errorf("public key must start with %q", KeyPrefix)
	}
	if rest == "" {
		return nil, fmt.Errorf("public key has nothing after %q", KeyPrefix)
	}
	raw, err := base58.Decode(rest)
	if err != nil {
		return nil, fmt.Errorf("public key after %q is not valid base58: %v", KeyPrefix, err)
	}
	if len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("public key decodes to %d bytes, an ed25519 public key has %d", len(raw), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), nil
}

// EncodeKey writes pub in the "publickeyv1_" + base58 form that [ParseKey]
// reads and that restate-server puts in the JWT "kid" header.
func EncodeKey(pub ed25519.PublicKey) string {
	return KeyPrefix + base58.Encode(pub)
}
