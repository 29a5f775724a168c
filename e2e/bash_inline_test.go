package e2e

// bash.subshell: false, through a real restate-server: a Bash handler
// whose invocations run inline, in its worker's own shell, keeps what one
// invocation leaves there for the next; an exit ends the worker after its
// answer, and the next invocation is served by a fresh one. The default
// handler beside it runs each invocation in a subshell.

import (
	"fmt"
	"testing"

	"github.com/fnbridge/fnbridge/internal/restateserver"
	"github.com/fnbridge/fnbridge/internal/testtool"
)

func TestBashInline(t *testing.T) {
	requireInterpreters(t)
	srv := restateserver.Start(t, restateserver.Options{})
	ws := newWorkspace(t, "inline.sh")
	cfg := ws.config(t, `services:
  - name: InlineSh
    handlers:
      - {name: count, runtime: bash, dir: fn, handler: inline.count, bash: {subshell: false}}
  - name: SubshellSh
    handlers:
      - {name: count, runtime: bash, dir: fn, handler: inline.count}
`)
	b := startBridge(t, cfg, testtool.FreeAddr(t))
	srv.Register(t, b.URI(), false)
	ctx := caseContext(t)

	for i, want := range []string{
		`{"n":1,"same_shell":true}`, `{"n":2,"same_shell":true}`,
		`{"n":3,"same_shell":true}`, // and exits: its answer stands
		`{"n":1,"same_shell":true}`, // a fresh worker
	} {
		body := `{}`
		if i == 2 {
			body = `{"exit":true}`
		}
		assertJSON(t, fmt.Sprintf("inline call %d", i), callOK(ctx, t, srv, "InlineSh", "count", body, nil), want)
	}
	for i := range 2 {
		assertJSON(t, fmt.Sprintf("subshell call %d", i), callOK(ctx, t, srv, "SubshellSh", "count", `{}`, nil), `{"n":1,"same_shell":false}`)
	}
}
