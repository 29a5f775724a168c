package identity_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/fnbridge/fnbridge/restate/identity"
)

type keyPair struct {
	pub  ed25519.PublicKey
	priv ed25519.PrivateKey
	id   string
}

func newKey(t *testing.T) keyPair {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return keyPair{pub, priv, identity.EncodeKey(pub)}
}

// sign builds a token as restate-server does: EdDSA, kid = publickeyv1_…,
// claims aud/nbf/iat/exp; withKid=false leaves the kid header out.
func sign(t *testing.T, k keyPair, claims jwt.MapClaims, withKid bool) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	if withKid {
		tok.Header["kid"] = k.id
	}
	s, err := tok.SignedString(k.priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func claims(aud string, nbf, exp time.Duration) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"aud": aud, "iat": now.Unix(), "nbf": now.Add(nbf).Unix(), "exp": now.Add(exp).Unix()}
}

func signed(token string) http.Header {
	h := http.Header{}
	h.Set("x-restate-signature-scheme", "v1")
	h.Set("x-restate-jwt-v1", token)
	return h
}

const path = "/invoke/Greeter/greet"

func TestParseKeyRoundTrip(t *testing.T) {
	k := newKey(t)
	if !strings.HasPrefix(k.id, "publickeyv1_") {
		t.Fatalf("EncodeKey = %q, want prefix publickeyv1_", k.id)
	}
	got, err := identity.ParseKey(k.id)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(k.pub) {
		t.Fatal("ParseKey(EncodeKey(pub)) != pub")
	}
}

func TestParseKeyRejects(t *testing.T) {
	cases := []struct{ name, key, mention string }{
		{"no prefix", "AfQwmwfgEZhrWpvv8N52SHpRtZqGGaFr4AZN6qtYWSiY", "must start with"},
		{"other prefix", "publickeyv2_AfQwmwfgEZhrWpvv8N52SHpRtZqGGaFr4AZN6qtYWSiY", "must start with"},
		{"empty body", "publickeyv1_", "nothing after"},
		{"not base58", "publickeyv1_0OIl", "not valid base58"},
		{"too short", "publickeyv1_3yZe7d", "decodes to"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := identity.ParseKey(tc.key)
			if err == nil || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("ParseKey(%q) error = %v, want mention of %q", tc.key, err, tc.mention)
			}
		})
	}
}

func TestNewVerifierNamesBadKeyByIndex(t *testing.T) {
	good := newKey(t).id
	_, err := identity.NewVerifier([]string{good, good, "publickeyv1_nope0"})
	if err == nil || !strings.Contains(err.Error(), "identity key [2]") {
		t.Fatalf("error = %v, want it to name key [2]", err)
	}
}

// An empty identity_keys accepts unsigned requests (README, configuration reference).
func TestNoKeysAcceptsEverything(t *testing.T) {
	v, err := identity.NewVerifier(nil)
	if err != nil || v != nil {
		t.Fatalf("NewVerifier(nil) = %v, %v; want nil, nil", v, err)
	}
	if err := v.Verify(path, http.Header{}); err != nil {
		t.Fatalf("nil verifier rejected an unsigned request: %v", err)
	}
}

func TestVerifyAccepts(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	v, err := identity.NewVerifier([]string{k1.id, k2.id})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		h    http.Header
	}{
		{"first key with kid", signed(sign(t, k1, claims(path, -time.Minute, time.Minute), true))},
		{"second key with kid", signed(sign(t, k2, claims(path, -time.Minute, time.Minute), true))},
		{"no kid, any configured key", signed(sign(t, k2, claims(path, -time.Minute, time.Minute), false))},
		{"audience as array", signed(sign(t, k1, jwt.MapClaims{"aud": []string{"/other", path}, "nbf": time.Now().Unix(), "exp": time.Now().Add(time.Minute).Unix()}, true))},
		{"expired within leeway", signed(sign(t, k1, claims(path, -time.Minute, -identity.Leeway/2), true))},
		{"not yet valid within leeway", signed(sign(t, k1, claims(path, identity.Leeway/2, time.Minute), true))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := v.Verify(path, tc.h); err != nil {
				t.Fatalf("Verify: %v", err)
			}
		})
	}
}

func TestVerifyRejects(t *testing.T) {
	k, other := newKey(t), newKey(t)
	v, err := identity.NewVerifier([]string{k.id})
	if err != nil {
		t.Fatal(err)
	}
	valid := claims(path, -time.Minute, time.Minute)

	hs256, err := jwt.NewWithClaims(jwt.SigningMethodHS256, valid).SignedString([]byte(k.pub))
	if err != nil {
		t.Fatal(err)
	}
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, valid).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	// Signed by `other` but claiming to be `k`.
	forgedTok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, valid)
	forgedTok.Header["kid"] = k.id
	forged, err := forgedTok.SignedString(other.priv)
	if err != nil {
		t.Fatal(err)
	}
	twoSchemes := signed(sign(t, k, valid, true))
	twoSchemes.Add("x-restate-signature-scheme", "v1")
	twoJWTs := signed(sign(t, k, valid, true))
	twoJWTs.Add("x-restate-jwt-v1", sign(t, k, valid, true))
	noJWT := http.Header{}
	noJWT.Set("x-restate-signature-scheme", "v1")
	unsigned := http.Header{}
	unsigned.Set("x-restate-signature-scheme", "unsigned")
	v2 := signed(sign(t, k, valid, true))
	v2.Set("x-restate-signature-scheme", "v2")

	cases := []struct {
		name    string
		h       http.Header
		want    error
		mention string
	}{
		{"no headers", http.Header{}, identity.ErrUnsigned, "request is unsigned"},
		{"scheme unsigned", unsigned, identity.ErrUnsigned, "request is unsigned"},
		{"scheme v2", v2, identity.ErrUnsupportedScheme, `"v2"`},
		{"two scheme headers", twoSchemes, identity.ErrMalformed, "2 x-restate-signature-scheme"},
		{"v1 without jwt", noJWT, identity.ErrMalformed, "without a x-restate-jwt-v1"},
		{"two jwt headers", twoJWTs, identity.ErrMalformed, "2 x-restate-jwt-v1"},
		{"garbage token", signed("not.a.jwt"), identity.ErrMalformed, "malformed"},
		{"HS256 token", signed(hs256), identity.ErrMalformed, "want EdDSA"},
		{"alg none", signed(none), identity.ErrMalformed, "want EdDSA"},
		{"unknown kid", signed(sign(t, other, valid, true)), identity.ErrUnknownKey, other.id},
		{"no kid, unknown key", signed(sign(t, other, valid, false)), identity.ErrUnknownKey, "none of the configured keys"},
		{"known kid, wrong signature", signed(forged), identity.ErrBadSignature, k.id},
		{"expired", signed(sign(t, k, claims(path, -time.Hour, -time.Minute), true)), identity.ErrExpired, "expired"},
		{"not valid yet", signed(sign(t, k, claims(path, time.Minute, time.Hour), true)), identity.ErrNotYetValid, "not valid yet"},
		{"wrong audience", signed(sign(t, k, claims("/invoke/Greeter/other", -time.Minute, time.Minute), true)), identity.ErrWrongAudience, path},
		{"no exp", signed(sign(t, k, jwt.MapClaims{"aud": path, "nbf": time.Now().Unix()}, true)), identity.ErrMissingClaim, "exp"},
		{"no nbf", signed(sign(t, k, jwt.MapClaims{"aud": path, "exp": time.Now().Add(time.Minute).Unix()}, true)), identity.ErrMissingClaim, "nbf"},
		{"no aud", signed(sign(t, k, jwt.MapClaims{"nbf": time.Now().Unix(), "exp": time.Now().Add(time.Minute).Unix()}, true)), identity.ErrMissingClaim, "aud"},
	}
	sentinels := []error{identity.ErrUnsigned, identity.ErrUnsupportedScheme, identity.ErrMalformed, identity.ErrUnknownKey,
		identity.ErrBadSignature, identity.ErrExpired, identity.ErrNotYetValid, identity.ErrWrongAudience, identity.ErrMissingClaim}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := v.Verify(path, tc.h)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify error = %v, want %v", err, tc.want)
			}
			// "clear and distinct": exactly one sentinel per error.
			for _, s := range sentinels {
				if s != tc.want && errors.Is(err, s) {
					t.Errorf("error %v also matches %v", err, s)
				}
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %q", err, tc.mention)
			}
		})
	}
}
