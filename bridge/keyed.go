package bridge

import (
	"context"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/restate"
)

// keyedHandler is what a handler's service type means for its
// invocations: whether they have a key, and what the context endpoint lets
// a steps-mode function do (state, promises, writes).
type keyedHandler struct {
	keyed bool
	info  stepctx.HandlerInfo
}

func keyedHandlerOf(svc *ServiceConfig, h *HandlerConfig) keyedHandler {
	return keyedHandler{keyed: svc.Keyed(), info: stepctx.HandlerInfo{
		Name:     svc.Name + "/" + h.Name,
		Keyed:    svc.Keyed(),
		Workflow: svc.Type == TypeWorkflow,
		Shared:   svc.HandlerType(h) == restate.HandlerTypeShared,
	}}
}

// withKey gives the function of a keyed invocation its key: FNBRIDGE_KEY
// in the per-invocation environment (in both durability modes, the only
// context a plain function gets). Other invocations get nothing.
func (k keyedHandler) withKey(ctx context.Context, key string) context.Context {
	if !k.keyed {
		return ctx
	}
	return functionruntime.WithInvocationEnv(ctx, functionruntime.EnvKey, key)
}
