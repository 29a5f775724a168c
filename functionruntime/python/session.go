package python

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"mime"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proc"
)

// Frame kinds of the worker protocol (see the package doc).
const (
	frameInput       = 'I'
	frameContext     = 'C'
	frameEnv         = 'N'
	frameReady       = 'K'
	frameLoadFailed  = 'X'
	frameSetOutputs  = 'O'
	frameOutputsFile = 'F'
	frameResult      = 'R'
	frameError       = 'E'
	frameDiscard     = 'D'
)

// idSize is the size of the request id that starts every request and
// response payload after the handshake.
const idSize = 8

// maxMessage bounds a handler error message kept from the worker.
const maxMessage = 4096

// launcher starts sessions for one registration.
type launcher struct {
	opts             Options
	interp           Interpreter
	spec             functionruntime.WorkerSpec
	module, function string
}

// session is one live worker process.
type session struct {
	proc.Base // the process and its scratch directory
	r         *bufio.Reader
	limit     int    // largest frame accepted
	last      uint64 // id of the previous request, to name late frames
}

// start launches a worker and waits until it imported the handler.
func (l *launcher) start(ctx context.Context) (proc.Session, error) {
	if err := l.spec.CheckDir(); err != nil {
		return nil, fmt.Errorf("python handler %q: %w", l.spec.Handler, err)
	}
	tmp, err := proc.ScratchDir("python")
	if err != nil {
		return nil, fmt.Errorf("create worker scratch directory: %w", err)
	}
	outputs := filepath.Join(tmp, "outputs")
	if err := os.WriteFile(outputs, nil, 0o600); err != nil {
		_ = os.RemoveAll(tmp)
		return nil, fmt.Errorf("create outputs file: %w", err)
	}
	owned := map[string]string{proc.OutputsEnv: outputs}
	for k, v := range l.interp.activation(l.spec.Env) {
		owned[k] = v
	}
	env, err := proc.BuildEnv(l.spec.Dir, l.spec.Env, owned)
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, err
	}
	// The bootstrap goes in a file the stub reads, not on the command line:
	// ps and audit logs show a short line, and it stays far from the
	// kernel's 128 KiB bound on one argument.
	boot := filepath.Join(tmp, "worker.py")
	if err := os.WriteFile(boot, []byte(bootstrap), 0o400); err != nil {
		_ = os.RemoveAll(tmp)
		return nil, fmt.Errorf("write worker bootstrap: %w", err)
	}
	p, err := proc.Start(proc.Config{
		Path:        l.interp.Executable,
		Args:        []string{"-I", "-u", "-c", bootstrapStub, boot, l.module, l.function, l.spec.Dir, strconv.Itoa(l.opts.MaxOutput)},
		Dir:         l.spec.Dir,
		Env:         env,
		Logger:      l.spec.Logger,
		MaxLogLine:  l.opts.MaxLogLine,
		NoSubreaper: l.opts.NoSubreaper,
		Limits:      proc.Limits(l.spec.Limits),
	})
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, fmt.Errorf("python handler %q: %w", l.spec.Handler, err)
	}
	s := &session{
		Base:  proc.Base{P: p, Tmp: tmp},
		r:     bufio.NewReaderSize(p.Responses(), 64<<10),
		limit: l.opts.MaxOutput + proc.MaxOutputsFile + 64<<10,
	}
	if err := l.handshake(ctx, s); err != nil {
		s.Stop(l.opts.Grace)
		return nil, err
	}
	return s, nil
}

// handshake waits for the worker's ready or load-failure frame.
func (l *launcher) handshake(ctx context.Context, s *session) error {
	stop := context.AfterFunc(ctx, s.P.Interrupt)
	kind, payload, err := proc.ReadFrame(s.r, 1<<20)
	stop()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("python handler %q: start interrupted: %w", l.spec.Handler, ctx.Err())
		}
		s.Stop(l.opts.Grace) // so the exit status and last lines are known
		return fmt.Errorf("python handler %q: worker exited while loading (%s)%s",
			l.spec.Handler, s.P.ExitDescription(), proc.LastLinesSuffix(s.P.RecentLines(5)))
	}
	s.P.SyncLogs()
	switch kind {
	case frameReady:
		var ready struct{ Python, File string }
		_ = json.Unmarshal(payload, &ready)
		l.spec.Logger.Debug().Int("pid", s.P.Pid()).Str("python", ready.Python).Str("file", ready.File).
			Msg("python worker ready")
		return nil
	case frameLoadFailed:
		var f struct{ Stage, Type, Message string }
		if err := json.Unmarshal(payload, &f); err != nil {
			return fmt.Errorf("python handler %q: unreadable load failure from worker: %w", l.spec.Handler, err)
		}
		return fmt.Errorf("python handler %q: %s: %s: %s", l.spec.Handler, f.Stage, f.Type, proc.Clip(f.Message, maxMessage))
	default:
		return fmt.Errorf("python handler %q: worker sent frame %q before ready", l.spec.Handler, kind)
	}
}

// worker is the functionruntime.Worker of one registration.
type worker struct {
	sup       *proc.Supervisor
	maxOutput int
}

// Invoke runs the handler once with inv.Input as its JSON argument.
func (w *worker) Invoke(ctx context.Context, inv functionruntime.Invocation) (functionruntime.Result, error) {
	if err := checkContentType(inv.ContentType); err != nil {
		return functionruntime.Result{}, err
	}
	return proc.Call(ctx, w.sup, &inv.Logger, func(s *session) (functionruntime.Result, error) {
		return s.invoke(inv.Input, inv.Context, inv.Env)
	})
}

// Close kills the worker's process group and reaps it.
func (w *worker) Close() error { return w.sup.Close() }

// checkContentType accepts JSON input only: empty, application/json or
// any */*+json type, parameters ignored.
func checkContentType(ct string) error {
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	return &functionruntime.HandlerError{
		Terminal: true,
		Code:     415,
		Type:     "UnsupportedContentType",
		Message:  fmt.Sprintf("python handlers take JSON input (application/json), not %q", ct),
	}
}

// newID draws a request id. It is random rather than a counter so that
// nothing in the worker (a forked child, a thread of an earlier
// invocation, the handler itself) can prepare a frame for a request it has
// not seen.
func (s *session) newID() uint64 {
	for {
		if id := rand.Uint64(); id != s.last && id != 0 {
			return id
		}
	}
}

// invoke sends one input (after the per-invocation environment and the
// step context, when there are any) and reads frames up to the result or
// error. Every
// response frame must name this request's id; any other frame means
// something besides the worker loop wrote to the response pipe, and the
// worker is ended (a ProtocolError) rather than letting a result land on
// the wrong invocation.
func (s *session) invoke(input []byte, sc *functionruntime.StepContext, env map[string]string) (functionruntime.Result, error) {
	if n := s.r.Buffered(); n > 0 {
		// Left over from the previous request: the pipe is not ours alone.
		return functionruntime.Result{}, &proc.ProtocolError{Err: fmt.Errorf(
			"%d bytes arrived on the response pipe after the previous invocation ended (written by a forked child, a background thread or the handler itself); worker ended", n)}
	}
	id := s.newID()
	defer func() { s.last = id }()
	if len(env) > 0 {
		e, err := json.Marshal(env)
		if err != nil {
			return functionruntime.Result{}, err
		}
		if err := proc.WriteFrame(s.P.Requests(), frameEnv, append(binary.BigEndian.AppendUint64(nil, id), e...)); err != nil {
			return functionruntime.Result{}, &proc.ProtocolError{Err: fmt.Errorf("send the invocation environment: %w", err)}
		}
	}
	if sc != nil {
		c, err := json.Marshal(stepContextFrame{Address: sc.Address, Token: sc.Token, Fresh: sc.Fresh, Ordered: sc.Ordered})
		if err != nil {
			return functionruntime.Result{}, err
		}
		if err := proc.WriteFrame(s.P.Requests(), frameContext, append(binary.BigEndian.AppendUint64(nil, id), c...)); err != nil {
			return functionruntime.Result{}, &proc.ProtocolError{Err: fmt.Errorf("send step context: %w", err)}
		}
	}
	payload := binary.BigEndian.AppendUint64(make([]byte, 0, idSize+len(input)), id)
	if err := proc.WriteFrame(s.P.Requests(), frameInput, append(payload, input...)); err != nil {
		return functionruntime.Result{}, &proc.ProtocolError{Err: fmt.Errorf("send input: %w", err)}
	}
	var set map[string]string
	var file []byte
	discard := false
	for {
		kind, payload, err := s.readFrame(id)
		if err != nil {
			return functionruntime.Result{}, err
		}
		switch kind {
		case frameSetOutputs:
			if err := json.Unmarshal(payload, &set); err != nil {
				return functionruntime.Result{}, &proc.ProtocolError{Err: fmt.Errorf("bad outputs frame: %w", err)}
			}
		case frameOutputsFile:
			file = payload
		case frameDiscard:
			// A thread of the function is still inside a context call (a
			// background step): the result stands, the worker goes.
			discard = true
		case frameResult:
			outputs, err := mergeOutputs(file, set)
			if err != nil {
				if discard {
					return functionruntime.Result{}, &proc.DiscardSession{Err: err}
				}
				return functionruntime.Result{}, err
			}
			res := functionruntime.Result{Output: payload, ContentType: "application/json", Outputs: outputs}
			if discard {
				return res, &proc.DiscardSession{}
			}
			return res, nil
		case frameError:
			var f struct {
				Type, Message string
				Terminal      bool
				Code          int
				// Discard: a thread of the failed steps attempt is still
				// inside a context call (a background step), which only
				// ending the worker stops.
				Discard bool
			}
			if err := json.Unmarshal(payload, &f); err != nil {
				return functionruntime.Result{}, &proc.ProtocolError{Err: fmt.Errorf("bad error frame: %w", err)}
			}
			he := &functionruntime.HandlerError{
				Terminal: f.Terminal, Type: f.Type, Message: proc.Clip(f.Message, maxMessage), Code: f.Code,
			}
			if f.Discard {
				return functionruntime.Result{}, &proc.DiscardSession{Err: he}
			}
			return functionruntime.Result{}, he
		default:
			return functionruntime.Result{}, &proc.ProtocolError{Err: errors.New("unexpected frame kind " + strconv.QuoteRune(rune(kind)))}
		}
	}
}

// readFrame reads one response frame of request id and returns it without
// the id.
func (s *session) readFrame(id uint64) (byte, []byte, error) {
	kind, payload, err := proc.ReadFrame(s.r, s.limit)
	if err != nil {
		return 0, nil, &proc.ProtocolError{Err: fmt.Errorf("read response: %w", err)}
	}
	if len(payload) < idSize {
		return 0, nil, &proc.ProtocolError{Err: fmt.Errorf("response frame %q of %d bytes carries no request id; worker ended", kind, len(payload))}
	}
	// Ids are never 0, so a worker's first request has no "previous" one.
	switch got := binary.BigEndian.Uint64(payload); {
	case got == id:
		return kind, payload[idSize:], nil
	case got == s.last && s.last != 0:
		return 0, nil, &proc.ProtocolError{Err: fmt.Errorf(
			"response frame %q answers the previous request (id %016x), not this one (id %016x): written late by a forked child, a background thread or the handler itself; worker ended", kind, got, id)}
	default:
		return 0, nil, &proc.ProtocolError{Err: fmt.Errorf(
			"response frame %q names request id %016x, not this request's %016x: forged or stray frame on the response pipe; worker ended", kind, got, id)}
	}
}

// mergeOutputs parses the outputs file and lays set_output pairs over it.
func mergeOutputs(file []byte, set map[string]string) (map[string]string, error) {
	if len(file) == 0 && len(set) == 0 {
		return nil, nil
	}
	bad := func(err error) error {
		// Terminal, as the server's OUTPUTS_INVALID: the function ran,
		// and a retry would write the same outputs.
		return &functionruntime.HandlerError{Terminal: true, Type: functionruntime.InvalidOutputsType, Message: err.Error()}
	}
	outputs, err := proc.ParseOutputs(file)
	if err != nil {
		return nil, bad(err)
	}
	for k, v := range set {
		if err := proc.CheckOutput(k, v); err != nil {
			return nil, bad(fmt.Errorf("fnbridge.set_output: %w", err))
		}
		outputs[k] = v
	}
	return outputs, nil
}

// stepContextFrame is the JSON of a step context frame ('C') to the
// worker; fresh and ordered are sent only when true.
type stepContextFrame struct {
	Address string `json:"address"`
	Token   string `json:"token"`
	Fresh   bool   `json:"fresh,omitempty"`
	Ordered bool   `json:"ordered,omitempty"`
}
