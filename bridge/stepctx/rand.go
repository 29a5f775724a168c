package stepctx

import (
	"fmt"
	"math/rand/v2"
)

// randSource is an attempt's deterministic random sequence: seeded from
// Journal.RandomSeed, so the n-th value is the same on every attempt.
// PCG is a fixed, specified algorithm, so the sequence does not change
// across Go releases either.
type randSource struct{ pcg *rand.PCG }

func newRandSource(seed uint64) *randSource {
	return &randSource{pcg: rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)}
}

func (r *randSource) next() uint64 { return r.pcg.Uint64() }

// uuid4 is a version 4 (random) UUID built from the next 128 bits.
func (r *randSource) uuid4() string {
	hi, lo := r.next(), r.next()
	hi = hi&^0xf000 | 0x4000     // version 4
	lo = lo&^(0xc<<60) | 0x8<<60 // RFC 9562 variant
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", hi>>32, hi>>16&0xffff, hi&0xffff, lo>>48, lo&0xffffffffffff)
}
