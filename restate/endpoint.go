package restate

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/fnbridge/fnbridge/internal/version"
	"github.com/fnbridge/fnbridge/journal"
	"github.com/fnbridge/fnbridge/restate/discovery"
	"github.com/fnbridge/fnbridge/restate/identity"
	"github.com/fnbridge/fnbridge/restate/wire"
)

// Endpoint serves bound services to restate-server. It is an
// http.Handler; serve it with NewHTTPServer (h2c and HTTP/1.1).
type Endpoint struct {
	cfg      Config
	prefix   string
	verifier *identity.Verifier
	server   string // x-restate-server value

	mu       sync.RWMutex
	services []Service
	handlers map[string]map[string]*boundHandler
	// manifests caches the encoded manifest per manifest version.
	manifests map[int][]byte
	// err is the configuration error NewEndpoint found, if any.
	err error
	// active counts the invocation streams being served.
	active atomic.Int64
	// health is the readiness and drain state (health.go).
	health health
	// rejectLog logs refused unsigned requests, a burst at a time: a
	// caller without the key must not be able to fill the log.
	rejectLog zerolog.Logger
}

// maxLoggedPath bounds the request path a refusal logs.
const maxLoggedPath = 256

type boundHandler struct {
	service, name string
	fn            HandlerFunc
	deliverCancel bool // Handler.DeliverCancel
}

// NewEndpoint returns an endpoint for cfg with no services bound.
//
// An invalid Config (unknown protocol mode, a negative size, count or
// timeout, a path prefix without a leading slash, an unparsable identity
// key) does not panic: the endpoint records the error, naming the field, and then Err
// and every Bind return it, and ServeHTTP answers every request with 500
// and the error. In particular a bad identity key never degrades into
// accepting unsigned requests.
func NewEndpoint(cfg Config) *Endpoint {
	e := &Endpoint{
		server:    version.ServerHeader(),
		handlers:  map[string]map[string]*boundHandler{},
		manifests: map[int][]byte{},
		health:    newHealth(),
	}
	e.err = e.configure(cfg)
	e.rejectLog = e.cfg.Logger.Sample(&zerolog.BurstSampler{Burst: 5, Period: 10 * time.Second})
	return e
}

// Err is the configuration error NewEndpoint found, or nil.
func (e *Endpoint) Err() error { return e.err }

// MaxJournalBytes is the journal bound in effect (Config.MaxJournalBytes,
// its default applied), for what keeps a journal elsewhere to match.
func (e *Endpoint) MaxJournalBytes() int { return e.cfg.MaxJournalBytes }

func (e *Endpoint) configure(cfg Config) error {
	switch cfg.ProtocolMode {
	case "":
		cfg.ProtocolMode = BidiStream
	case BidiStream, RequestResponse:
	default:
		return fmt.Errorf("restate: Config.ProtocolMode %q is neither %q nor %q", cfg.ProtocolMode, BidiStream, RequestResponse)
	}
	if cfg.MaxMessageSize < 0 {
		return fmt.Errorf("restate: Config.MaxMessageSize %d is negative", cfg.MaxMessageSize)
	}
	if cfg.MaxMessageSize == 0 {
		cfg.MaxMessageSize = wire.DefaultMaxMessageSize
	}
	switch {
	case cfg.StartTimeout < 0:
		return fmt.Errorf("restate: Config.StartTimeout %v is negative", cfg.StartTimeout)
	case cfg.MaxConcurrentInvocations < 0:
		return fmt.Errorf("restate: Config.MaxConcurrentInvocations %d is negative", cfg.MaxConcurrentInvocations)
	case cfg.MaxJournalBytes < 0:
		return fmt.Errorf("restate: Config.MaxJournalBytes %d is negative", cfg.MaxJournalBytes)
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.MaxConcurrentInvocations == 0 {
		cfg.MaxConcurrentInvocations = DefaultMaxConcurrentInvocations
	}
	if cfg.MaxJournalBytes == 0 {
		cfg.MaxJournalBytes = DefaultMaxJournalFactor * min(cfg.MaxMessageSize, math.MaxInt/DefaultMaxJournalFactor)
	}
	prefix := strings.TrimRight(cfg.PathPrefix, "/")
	if prefix != "" && !strings.HasPrefix(prefix, "/") {
		return fmt.Errorf("restate: Config.PathPrefix %q must start with /", cfg.PathPrefix)
	}
	v, err := identity.NewVerifier(cfg.IdentityKeys)
	if err != nil {
		return fmt.Errorf("restate: Config.IdentityKeys: %w", err)
	}
	e.cfg, e.prefix, e.verifier = cfg, prefix, v
	return nil
}

// Bind adds a service. Names are checked against the manifest rules; a
// service name bound twice, a duplicate handler or a handler without Fn
// is an error and leaves the endpoint unchanged.
func (e *Endpoint) Bind(svc Service) error {
	if e.err != nil {
		return e.err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, dup := e.handlers[svc.Name]; dup {
		return fmt.Errorf("restate: service %q is already bound", svc.Name)
	}
	for i, h := range svc.Handlers {
		if h.Fn == nil {
			return fmt.Errorf("restate: service %q handler %d (%q) has no Fn", svc.Name, i, h.Name)
		}
	}
	m := e.manifestLocked()
	m.Services = append(m.Services, manifestService(svc))
	if err := discovery.Validate(m); err != nil {
		return fmt.Errorf("restate: binding service %q: %w", svc.Name, err)
	}
	hs := make(map[string]*boundHandler, len(svc.Handlers))
	for _, h := range svc.Handlers {
		hs[h.Name] = &boundHandler{service: svc.Name, name: h.Name, fn: h.Fn, deliverCancel: h.DeliverCancel}
	}
	e.services = append(e.services, svc)
	e.handlers[svc.Name] = hs
	clear(e.manifests)
	return nil
}

// Manifest describes the bound services as the discovery manifest
// (protocol versions 5 to 7, the configured protocol mode).
func (e *Endpoint) Manifest() discovery.Manifest {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.manifestLocked()
}

func (e *Endpoint) manifestLocked() discovery.Manifest {
	m := discovery.Manifest{
		ProtocolMode:       e.cfg.ProtocolMode,
		MinProtocolVersion: journal.MinVersion,
		MaxProtocolVersion: journal.MaxVersion,
		Services:           make([]discovery.Service, 0, len(e.services)+1),
	}
	for _, s := range e.services {
		m.Services = append(m.Services, manifestService(s))
	}
	return m
}

func (e *Endpoint) lookup(service, handler string) *boundHandler {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.handlers[service][handler]
}

// ServeHTTP routes {prefix}/health (and /health/live, /health/ready),
// {prefix}/discover (and /discovery) and
// {prefix}/invoke/{service}/{handler}.
func (e *Endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header()["X-Restate-Server"] = []string{e.server}
	if r.ProtoMajor == 1 && r.ContentLength != 0 {
		// Only an invocation reads its body (serveInvoke takes this back).
		// Any other answer to a request with a body ends the connection:
		// net/http would otherwise read the unread body before answering,
		// unbounded, and a client announcing bytes it never sends would
		// hold the connection, and a descriptor, forever.
		w.Header()["Connection"] = connectionClose
	}
	if e.err != nil {
		httpError(w, http.StatusInternalServerError, "endpoint misconfigured: %v", e.err)
		return
	}
	path := r.URL.Path
	if e.prefix != "" {
		if !strings.HasPrefix(path, e.prefix) {
			httpError(w, http.StatusNotFound, "not found: path %q is outside the endpoint prefix %q", path, e.prefix)
			return
		}
		path = path[len(e.prefix):]
	}
	if e.serveHealth(w, r, path) { // before identity: probes are unsigned
		return
	}
	if err := e.verifier.Verify(e.audiencePath(r), r.Header); err != nil {
		p := r.URL.Path
		if len(p) > maxLoggedPath {
			p = strings.ToValidUTF8(p[:maxLoggedPath], "") + "..."
		}
		e.rejectLog.Warn().Err(err).Str("path", p).Msg("rejected request: request identity (logged at most 5 times in 10 s; the refusals are counted in full)")
		e.refused(RefusedUnauthenticated)
		httpError(w, http.StatusUnauthorized, "unauthorized: %v", err)
		return
	}
	switch {
	case path == "/discover" || path == "/discovery":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header()["Allow"] = allowDiscovery // RFC 9110 §15.5.6: a 405 says what is allowed
			httpError(w, http.StatusMethodNotAllowed, "discovery needs GET, got %s", r.Method)
			return
		}
		e.serveDiscovery(w, r)
	case strings.HasPrefix(path, "/invoke/"):
		service, handler, ok := strings.Cut(path[len("/invoke/"):], "/")
		if !ok || service == "" || handler == "" || strings.Contains(handler, "/") {
			httpError(w, http.StatusNotFound, "not found: malformed invoke path %q, want /invoke/{service}/{handler}", path)
			return
		}
		h := e.lookup(service, handler)
		if h == nil {
			// Logged and counted: restate-server retries such a stream for
			// as long as the registered deployment names the handler (one a
			// redeploy or reload removed, with invocations still pinned to
			// it), and an operator must see why.
			e.cfg.Logger.Warn().Str("handler", service+"/"+handler).
				Str("invocation_id", r.Header.Get("x-restate-invocation-id")).
				Msg("refused invocation: this deployment serves no such handler; restate-server retries it while the deployment it registered names the handler (one a reload or redeploy removed)")
			e.refused(RefusedUnknownHandler)
			httpError(w, http.StatusNotFound, "not found: no handler %s/%s is bound", service, handler)
			return
		}
		if r.Method != http.MethodPost {
			w.Header()["Allow"] = allowInvoke
			httpError(w, http.StatusMethodNotAllowed, "invoke needs POST, got %s", r.Method)
			return
		}
		e.serveInvoke(w, r, h)
	default:
		httpError(w, http.StatusNotFound, "not found: %q", path)
	}
}

func (e *Endpoint) serveDiscovery(w http.ResponseWriter, r *http.Request) {
	v, err := discovery.Negotiate(r.Header.Get("Accept"))
	if err != nil {
		httpError(w, http.StatusUnsupportedMediaType, "%v (this endpoint serves %s to %s)", err, discovery.ContentType(discovery.MinVersion), discovery.ContentType(discovery.MaxVersion))
		return
	}
	e.mu.Lock()
	body, ok := e.manifests[v]
	var private, dropped []string
	if !ok {
		m := e.manifestLocked()
		if private = discovery.PrivateDropped(m, v); len(private) == 0 {
			body, err = discovery.Encode(m, v)
			if err == nil {
				e.manifests[v] = body
				dropped = discovery.DroppedFields(m, v)
			}
		}
	}
	e.mu.Unlock()
	if len(private) > 0 {
		// Served anyway, the manifest would make them public.
		e.cfg.Logger.Error().Int("manifest_version", v).Strs("private", private).
			Msg("refused discovery: the runtime accepts no manifest version that can keep these handlers private to the ingress")
		httpError(w, http.StatusNotAcceptable, "%s %s private to the ingress (ingressPrivate), which manifest v%d cannot say, and a runtime given it would let anyone call them at its ingress: offer manifest v3 or newer in Accept (a newer restate-server) or make them public", strings.Join(private, ", "), isAre(len(private)), v)
		return
	}
	if len(dropped) > 0 {
		// Once per version: the manifest is encoded once.
		e.cfg.Logger.Warn().Int("manifest_version", v).Strs("dropped", dropped).
			Msg("the runtime negotiated a manifest version that cannot carry these settings: it will not apply them")
	}
	if err != nil {
		httpError(w, http.StatusInternalServerError, "encoding the manifest: %v", err)
		return
	}
	w.Header().Set("Content-Type", discovery.ContentType(v))
	_, _ = w.Write(body)
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// The Allow headers of a 405 answer.
var (
	allowDiscovery = []string{"GET, HEAD"}
	allowInvoke    = []string{"POST"}
)

// connectionClose is the Connection header of an HTTP/1.1 answer that
// leaves the request's body unread.
var connectionClose = []string{"close"}

// audiencePath is the path a request identity token is signed for:
// restate-server signs the path below the deployment's URL, so a
// PathPrefix (part of that URL) is not in it.
func (e *Endpoint) audiencePath(r *http.Request) string {
	p := r.URL.EscapedPath()
	if e.prefix != "" {
		if pre := (&url.URL{Path: e.prefix}).EscapedPath(); strings.HasPrefix(p, pre) {
			return p[len(pre):]
		}
	}
	return p
}

func httpError(w http.ResponseWriter, code int, format string, args ...any) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = fmt.Fprintf(w, format+"\n", args...)
}
