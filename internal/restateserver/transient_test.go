package restateserver

import (
	"errors"
	"testing"
)

// Query retries only what restate-server calls benign while partitions are
// placed after a (re)start; any other failure reaches the caller at once.
func TestTransientQueryError(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{&HTTPError{Status: 500, Body: `{"message":"Datafusion error: External error: node N1:2 was shut down or removed"}`}, true},
		{&HTTPError{Status: 500, Body: `partition 1 doesn't exist on this node, this is benign`}, true},
		// Seen in CI right after a cluster node's restart.
		{&HTTPError{Status: 500, Body: `{"message":"Datafusion error: External error: expecting a partition store"}`}, true},
		{&HTTPError{Status: 500, Body: `{"message":"syntax error at or near SELEC"}`}, false},
		{&HTTPError{Status: 400, Body: `was shut down or removed`}, false},
		{errors.New("connection refused"), false},
	}
	for _, c := range cases {
		if got := transientQueryError(c.err); got != c.want {
			t.Errorf("transientQueryError(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
