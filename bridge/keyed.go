package bridge

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

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

// keyedHandlerOf is h's keyedHandler; services are serviceTypes of the
// configuration.
func keyedHandlerOf(svc *ServiceConfig, h *HandlerConfig, services map[string]string, handlers map[string][]string) keyedHandler {
	return keyedHandler{keyed: svc.Keyed(), info: stepctx.HandlerInfo{
		Name:     svc.Name + "/" + h.Name,
		Keyed:    svc.Keyed(),
		Workflow: svc.Type == TypeWorkflow,
		Shared:   svc.HandlerType(h) == restate.HandlerTypeShared,
		Services: services,
		Handlers: handlers,
	}}
}

// serviceHandlers are cfg's services by name, with their handlers' names:
// what the context endpoint checks a call's handler against.
func serviceHandlers(cfg *Config) map[string][]string {
	m := make(map[string][]string, len(cfg.Services))
	for i := range cfg.Services {
		for _, h := range cfg.Services[i].Handlers {
			m[cfg.Services[i].Name] = append(m[cfg.Services[i].Name], h.Name)
		}
	}
	return m
}

// serviceTypes are cfg's services by name, with their type: what the
// context endpoint checks a call's key against.
func serviceTypes(cfg *Config) map[string]string {
	m := make(map[string]string, len(cfg.Services))
	for i := range cfg.Services {
		svc := &cfg.Services[i]
		if svc.Keyed() {
			m[svc.Name] = svc.Type
		} else {
			m[svc.Name] = TypeService
		}
	}
	return m
}

// checkKey refuses a key the runtime could not pass to the function (it
// would refuse it in words about gRPC metadata): before anything runs,
// with the code of a bad request, since the key comes from the caller.
func (k keyedHandler) checkKey(key string) error {
	if !k.keyed {
		return nil
	}
	bad := func(format string, args ...any) error {
		return &Error{Class: ClassInvalidInput, Code: restate.CodeBadRequest, Message: fmt.Sprintf(format, args...)}
	}
	switch {
	case len(key) > functionruntime.MaxInvocationEnvValue:
		return bad("the key is %d bytes: fnbridge gives a function keys of at most %d bytes (FNBRIDGE_KEY)", len(key), functionruntime.MaxInvocationEnvValue)
	case strings.IndexByte(key, 0) >= 0:
		return bad("the key holds a NUL byte, which no environment variable can: fnbridge gives a function its key as FNBRIDGE_KEY")
	case !utf8.ValidString(key):
		return bad("the key is not UTF-8: fnbridge gives a function its key as FNBRIDGE_KEY, UTF-8 text")
	}
	return nil
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
