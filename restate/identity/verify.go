package identity

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Header names of request identity v1.
const (
	SchemeHeader = "x-restate-signature-scheme"
	JWTHeader    = "x-restate-jwt-v1"
	// SchemeV1 is the only signed scheme; SchemeUnsigned is what a server
	// without a key may send.
	SchemeV1       = "v1"
	SchemeUnsigned = "unsigned"
)

// Leeway is the clock skew tolerated when checking exp and nbf. The server
// already issues tokens valid from (now - its leeway) to (now + its leeway),
// so only skew between the two machines' clocks needs covering here.
const Leeway = 10 * time.Second

// Errors of [Verifier.Verify]; each returned error wraps exactly one of
// them, and the endpoint answers any of them with 401 Unauthorized.
var (
	ErrUnsigned          = errors.New("request is unsigned")
	ErrUnsupportedScheme = errors.New("unsupported signature scheme")
	ErrMalformed         = errors.New("malformed request identity")
	ErrUnknownKey        = errors.New("signed by an unknown key")
	ErrBadSignature      = errors.New("signature does not verify")
	ErrExpired           = errors.New("request identity token has expired")
	ErrNotYetValid       = errors.New("request identity token is not valid yet")
	ErrWrongAudience     = errors.New("request identity token is for another path")
	ErrMissingClaim      = errors.New("request identity token lacks a required claim")
)

// Verifier checks request identity against a fixed set of public keys. A
// nil *Verifier (no keys configured) accepts every request.
type Verifier struct {
	keys map[string]ed25519.PublicKey // by "publickeyv1_…" key id
	all  []ed25519.PublicKey          // for tokens without a kid
	now  func() time.Time
}

// NewVerifier parses keys ("publickeyv1_…", see [ParseKey]). An error names
// the offending key by its index. No keys returns (nil, nil): the nil
// *Verifier accepts unsigned requests, which is what an endpoint without
// configured keys must do.
func NewVerifier(keys []string) (*Verifier, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	v := &Verifier{keys: make(map[string]ed25519.PublicKey, len(keys)), now: time.Now}
	for i, k := range keys {
		pub, err := ParseKey(k)
		if err != nil {
			return nil, fmt.Errorf("identity key [%d] %q: %w", i, k, err)
		}
		// Re-encode so the lookup matches the kid the server writes even if
		// the configured string differs in a non-canonical way.
		id := EncodeKey(pub)
		if _, dup := v.keys[id]; dup {
			continue
		}
		v.keys[id] = pub
		v.all = append(v.all, pub)
	}
	return v, nil
}

// Verify checks the identity headers of a request to path, which must be
// the request path as the server sent it (r.URL.EscapedPath()): the token's
// audience must equal it, so a token captured for one handler cannot be
// replayed against another. It returns nil when v is nil.
func (v *Verifier) Verify(path string, h http.Header) error {
	if v == nil {
		return nil
	}
	schemes := h.Values(SchemeHeader)
	switch {
	case len(schemes) == 0:
		return fmt.Errorf("%w: no %s header, but this endpoint requires scheme %s (configure the restate-server request identity private key)", ErrUnsigned, SchemeHeader, SchemeV1)
	case len(schemes) > 1:
		return fmt.Errorf("%w: %d %s headers", ErrMalformed, len(schemes), SchemeHeader)
	case schemes[0] == SchemeUnsigned:
		return fmt.Errorf("%w: %s is %q, but this endpoint requires scheme %s (configure the restate-server request identity private key)", ErrUnsigned, SchemeHeader, SchemeUnsigned, SchemeV1)
	case schemes[0] != SchemeV1:
		return fmt.Errorf("%w: %s is %q, want %q", ErrUnsupportedScheme, SchemeHeader, schemes[0], SchemeV1)
	}
	tokens := h.Values(JWTHeader)
	switch len(tokens) {
	case 0:
		return fmt.Errorf("%w: scheme %s without a %s header", ErrMalformed, SchemeV1, JWTHeader)
	case 1:
	default:
		return fmt.Errorf("%w: %d %s headers", ErrMalformed, len(tokens), JWTHeader)
	}
	kid := ""
	_, err := jwt.Parse(tokens[0], func(t *jwt.Token) (any, error) {
		if _, ok := t.Method.(*jwt.SigningMethodEd25519); !ok {
			return nil, fmt.Errorf("%w: token algorithm %v, want EdDSA", ErrMalformed, t.Header["alg"])
		}
		raw, present := t.Header["kid"]
		if !present {
			// No key id: any configured key may have signed it.
			set := jwt.VerificationKeySet{Keys: make([]jwt.VerificationKey, len(v.all))}
			for i, k := range v.all {
				set.Keys[i] = k
			}
			return set, nil
		}
		s, ok := raw.(string)
		if !ok {
			return nil, fmt.Errorf("%w: token kid is %T, want a string", ErrMalformed, raw)
		}
		kid = s
		key, ok := v.keys[s]
		if !ok {
			return nil, fmt.Errorf("%w: kid %q is not one of the %d configured keys", ErrUnknownKey, s, len(v.keys))
		}
		return key, nil
	},
		jwt.WithAudience(path),
		jwt.WithExpirationRequired(),
		jwt.WithNotBeforeRequired(),
		jwt.WithLeeway(Leeway),
		jwt.WithTimeFunc(v.now),
	)
	if err != nil {
		return classify(err, kid, path)
	}
	return nil
}

// classify turns a jwt error into one of this package's errors, keeping the
// library's text as detail.
func classify(err error, kid, path string) error {
	switch {
	case errors.Is(err, ErrMalformed), errors.Is(err, ErrUnknownKey):
		return err
	case errors.Is(err, jwt.ErrTokenMalformed):
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		if kid == "" {
			return fmt.Errorf("%w: the token has no kid and verifies with none of the configured keys", ErrUnknownKey)
		}
		return fmt.Errorf("%w: token signature does not verify with key %q", ErrBadSignature, kid)
	case errors.Is(err, jwt.ErrTokenExpired):
		return fmt.Errorf("%w (leeway %s): %v", ErrExpired, Leeway, err)
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return fmt.Errorf("%w (leeway %s): %v", ErrNotYetValid, Leeway, err)
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return fmt.Errorf("%w: audience is not %q", ErrWrongAudience, path)
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return fmt.Errorf("%w: %v", ErrMissingClaim, err)
	default:
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
}
