package bridge_test

import (
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/bridge"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
	"github.com/fnbridge/fnbridge/restate"
)

// keyedConfig is a one-service configuration of type typ (and the
// service-level extra lines) with the given handlers, each a name and the
// lines after it.
func keyedConfig(typ, extra string, handlers ...string) string {
	var b strings.Builder
	b.WriteString("services:\n  - name: Counter\n")
	if typ != "" {
		b.WriteString("    type: " + typ + "\n")
	}
	b.WriteString(extra)
	b.WriteString("    handlers:\n")
	for _, h := range handlers {
		name, lines, _ := strings.Cut(h, "\n")
		b.WriteString("      - name: " + name + "\n        runtime: python\n        dir: functions\n        handler: greeter.greet\n" + lines)
	}
	return b.String()
}

// Service and handler types: type defaults to service; shared handlers of
// a virtual object are SHARED, the others EXCLUSIVE; a workflow's run is
// WORKFLOW and every other handler SHARED (shared: true there is allowed,
// and changes nothing). The manifest carries them, and lazy_state as
// enableLazyState.
func TestKeyedServiceTypes(t *testing.T) {
	for _, tc := range []struct {
		name, typ, extra string
		handlers         []string
		want             map[string]restate.HandlerType
		lazy             bool
	}{
		{"plain service", "", "", []string{"add"}, map[string]restate.HandlerType{"add": ""}, false},
		{"virtual object", "virtual_object", "    lazy_state: true\n", []string{"add", "get\n        shared: true\n"},
			map[string]restate.HandlerType{"add": restate.HandlerTypeExclusive, "get": restate.HandlerTypeShared}, true},
		{"workflow", "workflow", "", []string{"run", "approve", "status\n        shared: true\n"},
			map[string]restate.HandlerType{"run": restate.HandlerTypeWorkflow, "approve": restate.HandlerTypeShared, "status": restate.HandlerTypeShared}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := bridge.LoadConfig(writeConfig(t, keyedConfig(tc.typ, tc.extra, tc.handlers...)))
			if err != nil {
				t.Fatal(err)
			}
			s := &cfg.Services[0]
			wantType := tc.typ
			if wantType == "" {
				wantType = bridge.TypeService
			}
			if s.Type != wantType || s.Keyed() != (wantType != bridge.TypeService) {
				t.Fatalf("type %q keyed %v, want %q", s.Type, s.Keyed(), wantType)
			}
			for i := range s.Handlers {
				if got := s.HandlerType(&s.Handlers[i]); got != tc.want[s.Handlers[i].Name] {
					t.Errorf("handler %s: type %q, want %q", s.Handlers[i].Name, got, tc.want[s.Handlers[i].Name])
				}
			}
			b, err := bridge.New(cfg, bridge.Options{Clients: map[string]executorv1.FunctionRuntimeClient{"python": newFakeRuntime()}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close(t.Context()) })
			m := b.Manifest().Services[0]
			if m.Type != map[string]restate.ServiceType{bridge.TypeService: restate.ServiceTypeService,
				bridge.TypeVirtualObject: restate.ServiceTypeVirtualObject, bridge.TypeWorkflow: restate.ServiceTypeWorkflow}[wantType] {
				t.Errorf("manifest service type %q", m.Type)
			}
			if lazy := m.EnableLazyState != nil && *m.EnableLazyState; lazy != tc.lazy {
				t.Errorf("manifest enableLazyState = %v, want %v", m.EnableLazyState, tc.lazy)
			}
			for _, h := range m.Handlers {
				if h.Type != tc.want[h.Name] {
					t.Errorf("manifest handler %s: type %q, want %q", h.Name, h.Type, tc.want[h.Name])
				}
			}
		})
	}
}

// "Config errors name the YAML field": a shared handler of a plain
// service, a shared workflow run, a workflow without run, an unknown type,
// lazy_state on a plain service.
func TestKeyedConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		name, typ, extra string
		handlers         []string
		want             string
	}{
		{"shared in a service", "", "", []string{"add", "get\n        shared: true\n"},
			`services[0].handlers[1].shared: only handlers of a virtual_object can be shared; service "Counter" is a plain service (type: service)`},
		{"shared in an explicit service", "service", "", []string{"get\n        shared: true\n"},
			`services[0].handlers[0].shared: only handlers of a virtual_object can be shared`},
		{"shared workflow run", "workflow", "", []string{"run\n        shared: true\n"},
			`services[0].handlers[0].shared: the run handler of workflow "Counter" is the workflow itself and cannot be shared`},
		{"workflow without run", "workflow", "", []string{"start", "approve"},
			`services[0].handlers: workflow "Counter" has no handler named run: a workflow needs one`},
		{"unknown type", "actor", "", []string{"add"},
			`services[0].type: "actor" is not allowed (service | virtual_object | workflow)`},
		{"lazy state of a service", "", "    lazy_state: true\n", []string{"add"},
			`services[0].lazy_state: only a virtual_object or workflow has state to load lazily`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := bridge.LoadConfig(writeConfig(t, keyedConfig(tc.typ, tc.extra, tc.handlers...)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
