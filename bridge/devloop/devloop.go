// Package devloop is the loop of `bridge dev`: it registers the serving
// bridge with restate-server's admin API, watches the configuration file
// and every handler's source files (fsnotify, on their directories),
// debounces bursts of events into one change, reloads the bridge.Live with
// the configuration (read again when the file changed), and registers
// again, forced, when the manifest it serves changed. Each reload is one
// log line naming what changed and the outcome; a version that fails (a
// syntax error, an invalid configuration) is reported and the previous
// one keeps serving.
package devloop

import (
	"bytes"
	"context"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/restate/discovery"
)

// Config is one dev loop.
type Config struct {
	// Live is the bridge being served.
	Live *bridge.Live
	// Load reads the configuration file again the way the command first
	// read it (flag overrides, exposure check).
	Load func() (*bridge.Config, error)
	// Admin is restate-server's admin API URL; Advertise the URI it
	// reaches this bridge at, which is what gets registered.
	Admin, Advertise string
	Log              zerolog.Logger

	// Zero values take the defaults; tests shorten them.
	quiet, maxDelay time.Duration
	registerWait    time.Duration
}

// defaultRegisterWait bounds how long the first registration waits for an admin
// API that does not accept connections yet.
const defaultRegisterWait = 10 * time.Second

// adminTimeout bounds one registration: restate-server runs discovery
// against the bridge before it answers.
const adminTimeout = 30 * time.Second

// Run registers the deployment, then watches and reloads until ctx ends
// (nil, also while it still waits for the admin API) or the watcher fails. A first registration that fails is its
// error: a dev loop Restate does not know about serves no one.
func Run(ctx context.Context, c Config) error {
	w, err := newWatcher(c.Log)
	if err != nil {
		return err
	}
	defer w.close()
	if c.quiet > 0 {
		w.quiet = c.quiet
	}
	if c.maxDelay > 0 {
		w.maxDelay = c.maxDelay
	}
	// Watch before registering: a save made meanwhile is a reload later.
	w.set(watchSet(c.Live.Config()))

	l := &loop{c: c, w: w, client: &http.Client{Timeout: adminTimeout}}
	wait := c.registerWait
	if wait == 0 {
		wait = defaultRegisterWait
	}
	manifest := encode(c.Live.Manifest())
	d, err := registerWhenUp(ctx, l.client, c.Admin, c.Advertise, wait, func(why error) {
		// A warning: starting bridge dev before restate-server is the
		// usual mistake, and the dial error says where it looked.
		c.Log.Warn().Err(why).Str("admin", c.Admin).Msg("waiting for restate-server's admin API")
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting: as graceful as any other stop
		}
		return err
	}
	l.registered = manifest
	c.Log.Info().Str("deployment_id", d.ID).Str("uri", c.Advertise).Str("admin", c.Admin).
		Strs("services", d.ServiceNames()).Msg("registered with Restate; watching for changes")
	for {
		files, err := w.next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		l.reload(ctx, files)
	}
}

type loop struct {
	c      Config
	w      *watcher
	client *http.Client
	// registered is the manifest restate-server last accepted, encoded;
	// a manifest served that differs from it is registered again.
	registered []byte
}

func encode(m discovery.Manifest) []byte {
	b, err := discovery.Encode(m, discovery.MaxVersion)
	if err != nil {
		return nil // never equal to an encoded one: registering reports it
	}
	return b
}

// reload applies one batch of changed files and logs the one line that
// says what changed and how it went.
func (l *loop) reload(ctx context.Context, files []string) {
	live := l.c.Live
	cur := live.Config()
	cfg := cur
	if slices.Contains(files, cfg.Path) || slices.Contains(files, lostEvents) {
		next, err := l.c.Load()
		if err != nil {
			l.c.Log.Error().Strs("files", files).Str("error", err.Error()).
				Msg("reload failed: the configuration is invalid; the running version keeps serving")
			return
		}
		cfg = next
	}
	// Re-read every time: a handler's files may only now be nameable.
	// While Reload runs, both configurations' files are watched, so a save
	// made meanwhile is a change whichever ends up served.
	spec := watchSet(cfg)
	if cfg != cur {
		spec = spec.and(watchSet(cur))
	}
	l.w.set(spec)
	rep, err := live.Reload(ctx, cfg)
	if cfg != cur {
		// Then only the served one's: a refused configuration's files
		// (another handler dir) serve nothing.
		l.w.set(watchSet(live.Config()))
	}
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		l.c.Log.Error().Strs("files", files).Str("error", err.Error()).
			Msg("reload failed; the running version keeps serving")
		return
	}
	var regErr error
	var dep *Deployment
	if m := encode(live.Manifest()); !bytes.Equal(m, l.registered) {
		rctx, cancel := context.WithTimeout(ctx, adminTimeout)
		dep, regErr = Register(rctx, l.client, l.c.Admin, l.c.Advertise)
		cancel()
		if regErr == nil {
			l.registered = m
		}
	}
	if cur := live.Config(); slices.ContainsFunc(rep.Endpoint, func(f string) bool { return f == "identity_keys" || f == "allow_unauthenticated" }) {
		// As serve warns at start: a reload may be what turned signing off.
		if unsigned, _ := cur.CheckExposure("listen"); unsigned {
			l.c.Log.Warn().Str("listen", cur.Listen).Msg(bridge.UnauthenticatedWarning)
		}
	}
	ev := l.c.Log.Info()
	msg := "reloaded"
	switch {
	case len(rep.Failed) > 0:
		// A failed handler keeps serving its previous version; one that
		// is new is not served until it loads.
		ev, msg = l.c.Log.Error(), "reloaded, with failures: each failed handler keeps its previous version"
		if !rep.Changed() {
			msg = "reload failed: each failed handler keeps its previous version"
		}
	case regErr != nil:
		ev, msg = l.c.Log.Error(), "reloaded, but restate-server did not take the new manifest; the next change registers again"
	case !rep.Changed() && dep == nil:
		msg = "reload: nothing changed"
	}
	ev = ev.Strs("files", files)
	for _, f := range []struct {
		key  string
		list []string
	}{{"reloaded", rep.Reloaded}, {"added", rep.Added}, {"removed", rep.Removed}} {
		if len(f.list) > 0 {
			ev = ev.Strs(f.key, f.list)
		}
	}
	if len(rep.Failed) > 0 {
		ev = ev.Strs("failed", slices.Sorted(maps.Keys(rep.Failed))).Str("error", rep.Err().Error())
	}
	if len(rep.Endpoint) > 0 {
		ev = ev.Strs("endpoint", rep.Endpoint)
	}
	ev = ev.Bool("manifest_changed", rep.ManifestChanged)
	switch {
	case regErr != nil:
		ev = ev.Str("registration_error", regErr.Error())
	case dep != nil:
		ev = ev.Str("deployment_id", dep.ID).Strs("services", dep.ServiceNames())
	}
	ev.Msg(msg)
}
