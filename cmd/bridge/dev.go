package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/bridge/devloop"
)

// devFlags are what `bridge dev` adds to serve; nil for serve itself, so
// every method is a no-op on nil.
type devFlags struct {
	admin, advertise string
}

func newDevCmd(g *globalFlags) *cobra.Command {
	d := &devFlags{}
	cmd := newServeCmd(g, d)
	cmd.Use = "dev"
	cmd.Short = "Serve like serve, register with Restate, and reload on every change of the configuration or a function"
	cmd.Long = `dev serves the configuration as serve does, registers itself with
restate-server's admin API (forced, as restate deployments register --force
does), and watches the configuration file and every handler's source files.
On a change it reloads the handlers affected, registers again when the
manifest changed, and logs one line saying what changed and how it went. A
version that fails to load (a syntax error, an invalid configuration) is
reported, and the previous one keeps serving.`
	cmd.Flags().StringVar(&d.admin, "admin", "http://127.0.0.1:9070", "restate-server admin API URL")
	cmd.Flags().StringVar(&d.advertise, "advertise", "", "URL restate-server reaches this bridge at, which is what gets registered (default http://<listen address>)")
	return cmd
}

// check refuses --admin and --advertise values that are not http(s) URLs,
// before anything starts.
func (d *devFlags) check() error {
	if d == nil {
		return nil
	}
	for _, f := range []struct{ name, value string }{{"--admin", d.admin}, {"--advertise", d.advertise}} {
		if f.value == "" && f.name == "--advertise" {
			continue
		}
		u, err := url.Parse(f.value)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s %q: want an http:// or https:// URL with a host, like http://127.0.0.1:9070", f.name, f.value)
		}
	}
	return nil
}

// servable is what serve serves: a *bridge.Bridge, or for dev a
// *bridge.Live, which swaps bridges while it serves.
type servable interface {
	Start(ctx context.Context) error
	Handler() http.Handler
	Drain(ctx context.Context) error
	InFlight() int
	Close(ctx context.Context) error
}

// newEndpoint builds what the command serves.
func newEndpoint(cfg *bridge.Config, opts bridge.Options, d *devFlags) (servable, error) {
	if d == nil {
		b, err := bridge.New(cfg, opts)
		if err != nil {
			return nil, err
		}
		return b, nil
	}
	l, err := bridge.NewLive(cfg, opts)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// start runs the dev loop while b serves at addr; load reads the
// configuration file again the way the command did. stop ends the loop
// and returns its error; done is closed when the loop ended by itself (it
// failed). For serve, done is nil (never ready) and stop does nothing.
func (d *devFlags) start(ctx context.Context, log zerolog.Logger, b servable, addr string, load func() (*bridge.Config, error)) (done <-chan struct{}, stop func() error) {
	if d == nil {
		return nil, func() error { return nil }
	}
	advertise := d.advertise
	if advertise == "" {
		advertise = "http://" + addr
	}
	ctx, cancel := context.WithCancel(ctx)
	ended := make(chan struct{})
	var err error
	go func() {
		defer close(ended)
		err = devloop.Run(ctx, devloop.Config{Live: b.(*bridge.Live), Load: load, Admin: d.admin, Advertise: advertise, Log: log})
	}()
	return ended, func() error {
		cancel()
		<-ended
		return err
	}
}
