package bridge

import (
	"errors"
	"testing"
)

// A terminal failure's text carries the code Restate's ingress answers,
// the handler's own or 500 (Bash's exit 100), so `bridge invoke` and the
// log show it.
func TestErrorTextCarriesTheHandlersCode(t *testing.T) {
	for _, c := range []struct {
		err  *Error
		want string
	}{
		{&Error{Class: ClassTerminal, Message: "nope", Code: 404}, "terminal 404: nope"},
		{&Error{Class: ClassTerminal, Message: "nope"}, "terminal 500: nope"},
		{&Error{Class: ClassBusy, Message: "all busy"}, "busy: all busy"},
		// An empty message is the handler's, not the gRPC status around it
		// (`bridge invoke` showed "rpc error: code = Unknown desc = ...").
		{&Error{Class: ClassTerminal, Cause: errors.New("rpc error: code = Unknown desc = handler failed terminally")}, "terminal 500: (the handler gave no message)"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("%#v: %q, want %q", c.err, got, c.want)
		}
	}
}
