package restate_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/fnbridge/fnbridge/restate"
	"github.com/fnbridge/fnbridge/restate/restatetest"
)

// The endpoint reads the request body through a 4 KiB read-ahead buffer
// (restate/wire): frames that end inside it, straddle it or are larger
// than it, alone or sent together with others in one write, must all
// arrive whole and in order, on every protocol version.
func TestFramesAroundTheReadAheadSize(t *testing.T) {
	sizes := []int{1, 4096 - 8 - 8, 4096 - 8, 4096, 4096 + 1, 3 * 4096, 100 << 10}
	for _, v := range versions {
		for _, n := range sizes {
			in := bytes.Repeat([]byte{'a' + byte(n%26)}, n)
			t.Run(fmt.Sprintf("v%d/input of %d bytes", v, n), func(t *testing.T) {
				f := newFixture(t, restate.BidiStream, nil)
				got := play(t, f, f.client, v, "echo", []any{restatetest.Start("inv_in", 1), restatetest.Input(in)}, nil)
				want := append([]byte("echo:"), in...)
				wantStream(t, got, restatetest.Run(1, "invoke"), propose(v, 1, string(want)), output(string(want)), end)
			})
			t.Run(fmt.Sprintf("v%d/replayed completion of %d bytes", v, n), func(t *testing.T) {
				f := newFixture(t, restate.BidiStream, nil)
				got := play(t, f, f.client, v, "echo", []any{restatetest.Start("inv_rp", 3), restatetest.Input([]byte("hi")),
					restatetest.Run(1, "invoke"), restatetest.RunValue(1, in)}, nil)
				wantStream(t, got, output(string(in)), end)
				if f.counted("echo") != 0 {
					t.Fatal("fn ran on replay of a completed run")
				}
			})
		}
	}
}
