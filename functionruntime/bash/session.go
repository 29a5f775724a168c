package bash

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proc"
)

// logSync bounds the wait for the log marker after the handshake.
const logSync = time.Second

// Output content types; see the package doc.
const (
	contentJSON   = "application/json"
	contentText   = "text/plain; charset=utf-8"
	contentBinary = "application/octet-stream"
)

// launcher starts sessions for one registration.
type launcher struct {
	opts     Options
	exe      string
	spec     functionruntime.WorkerSpec
	file     string // "name.sh", relative to spec.Dir
	function string
}

// session is one live bash worker.
type session struct {
	proc.Base // the process and its scratch directory
	r         *bufio.Reader
	stdout    string // where the function's stdout goes
	outputs   string // FNBRIDGE_OUTPUTS
	maxOutput int
	buf       []byte // request buffer, reused
	owedD     int    // "D" lines still to come for invocations already answered by "R"
}

// start resolves the handler file, launches a worker and waits until it
// sourced the file and found the function.
func (l *launcher) start(ctx context.Context) (proc.Session, error) {
	fail := func(err error) error { return fmt.Errorf("bash handler %q: %w", l.spec.Handler, err) }
	file, err := resolveFile(l.spec.Dir, l.file)
	if err != nil {
		return nil, fail(err)
	}
	tmp, err := proc.ScratchDir("bash")
	if err != nil {
		return nil, fail(fmt.Errorf("create worker scratch directory: %w", err))
	}
	outputs := filepath.Join(tmp, "outputs")
	env, err := proc.BuildEnv(l.spec.Dir, l.spec.Env, map[string]string{proc.OutputsEnv: outputs})
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, fail(err)
	}
	marker := proc.NewMarker()
	p, err := proc.Start(proc.Config{
		Path:        l.exe,
		Args:        []string{"--noprofile", "--norc", "-c", bootstrap, "fnbridge-bash-worker", file, l.function, marker, tmp},
		Dir:         l.spec.Dir,
		Env:         env,
		Logger:      l.spec.Logger,
		Marker:      marker,
		MaxLogLine:  l.opts.MaxLogLine,
		NoSubreaper: l.opts.NoSubreaper,
		Limits:      proc.Limits(l.spec.Limits),
	})
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, fail(err)
	}
	s := &session{
		Base:      proc.Base{P: p, Tmp: tmp},
		r:         bufio.NewReaderSize(p.Responses(), 4096),
		stdout:    filepath.Join(tmp, "stdout"),
		outputs:   outputs,
		maxOutput: l.opts.MaxOutput,
	}
	if err := l.handshake(ctx, s); err != nil {
		s.Stop(l.opts.Grace)
		return nil, fail(err)
	}
	return s, nil
}

// handshake waits for "K", "E source N" or "E nofunc".
func (l *launcher) handshake(ctx context.Context, s *session) error {
	stop := context.AfterFunc(ctx, s.P.Interrupt)
	line, err := s.r.ReadString('\n')
	stop()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("start interrupted: %w", ctx.Err())
		}
		s.Stop(l.opts.Grace) // so the exit status and last lines are known
		return fmt.Errorf("worker exited while sourcing %s (%s)%s", l.file, s.P.ExitDescription(), proc.LastLinesSuffix(s.P.RecentLines(3)))
	}
	if !s.P.LogBarrier(logSync) {
		l.spec.Logger.Warn().Msg(proc.MarkerMissing)
	}
	line = strings.TrimSuffix(line, "\n")
	switch {
	case strings.HasPrefix(line, "K "):
		l.spec.Logger.Debug().Int("pid", s.P.Pid()).Str("bash", line[2:]).Msg("bash worker ready")
		return nil
	case strings.HasPrefix(line, "E source "):
		return fmt.Errorf("sourcing %s failed with status %s%s", l.file, line[len("E source "):], proc.LastLinesSuffix(s.P.RecentLines(3)))
	case line == "E nofunc":
		return fmt.Errorf("function %s is not defined in %s", l.function, l.file)
	default:
		return fmt.Errorf("worker sent %q before ready", proc.Clip(line, 80))
	}
}

// worker is the functionruntime.Worker of one registration.
type worker struct{ sup *proc.Supervisor }

// Invoke calls the function once with inv.Input as "$1".
func (w *worker) Invoke(ctx context.Context, inv functionruntime.Invocation) (functionruntime.Result, error) {
	if i := bytes.IndexByte(inv.Input, 0); i >= 0 {
		return functionruntime.Result{}, &functionruntime.HandlerError{
			Terminal: true,
			Type:     "InvalidInput",
			Message:  fmt.Sprintf("input has a NUL byte at offset %d; bash arguments cannot carry NUL bytes", i),
		}
	}
	var res functionruntime.Result
	err := w.sup.Do(ctx, &inv.Logger, func(s proc.Session) error {
		var err error
		res, err = s.(*session).invoke(inv.Input)
		return err
	})
	if err != nil {
		return functionruntime.Result{}, err
	}
	return res, nil
}

// Close kills the worker's process group and reaps it.
func (w *worker) Close() error { return w.sup.Close() }

// invoke sends one payload, waits for the status and collects the output.
func (s *session) invoke(input []byte) (functionruntime.Result, error) {
	s.buf = strconv.AppendInt(s.buf[:0], int64(len(input)), 10)
	s.buf = append(s.buf, '\n')
	var err error
	if len(input) <= 64<<10 {
		s.buf = append(s.buf, input...)
		_, err = s.P.Requests().Write(s.buf)
	} else if _, err = s.P.Requests().Write(s.buf); err == nil {
		_, err = s.P.Requests().Write(input)
	}
	if err != nil {
		return functionruntime.Result{}, &proc.ProtocolError{Err: fmt.Errorf("send payload: %w", err)}
	}
	status, err := s.readStatus()
	if err != nil {
		return functionruntime.Result{}, err
	}
	// Collect and remove the files whatever the status, so the next
	// invocation starts clean and late writers write to unlinked files.
	out, outErr := readBounded(s.stdout, s.maxOutput)
	outs, outsErr := readBounded(s.outputs, proc.MaxOutputsFile)
	_ = os.Remove(s.stdout)
	_ = os.Remove(s.outputs)
	if status != 0 {
		return functionruntime.Result{}, s.statusError(status)
	}
	if outErr != nil {
		return functionruntime.Result{}, outErr
	}
	if outsErr != nil {
		return functionruntime.Result{}, outsErr
	}
	var outputs map[string]string
	if len(outs) > 0 {
		if outputs, err = proc.ParseOutputs(outs); err != nil {
			return functionruntime.Result{}, &functionruntime.HandlerError{Type: "InvalidOutputs", Message: err.Error()}
		}
		if len(outputs) == 0 {
			outputs = nil
		}
	}
	out = bytes.TrimSuffix(out, []byte("\n"))
	return functionruntime.Result{Output: out, ContentType: contentType(out), Outputs: outputs}, nil
}

// readStatus reads the invocation's status: "R" from its subshell, or "D"
// from the worker loop when the subshell could not report. A "D" that
// closes an invocation already answered by "R" is skipped; it always
// arrives before the next invocation's lines, since the next subshell is
// forked only after it is written.
func (s *session) readStatus() (int, error) {
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return 0, &proc.ProtocolError{Err: fmt.Errorf("read status: %w", err)}
		}
		kind, rest, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		status, convErr := strconv.Atoi(rest)
		if convErr != nil || (kind != "R" && kind != "D") {
			return 0, &proc.ProtocolError{Err: fmt.Errorf("unexpected status line %q", proc.Clip(line, 80))}
		}
		switch {
		case kind == "R":
			s.owedD++
			return status, nil
		case s.owedD > 0:
			s.owedD--
		default:
			return status, nil
		}
	}
}

// statusError turns a non-zero status into a HandlerError whose message is
// the last non-empty stderr line of the invocation.
func (s *session) statusError(status int) error {
	// The marker was consumed before the status line was read only if the
	// log capture kept up; wait for it so the last line is known.
	s.P.LogBarrier(logSync)
	msg := fmt.Sprintf("exit status %d", status)
	lines := s.P.RecentLines(recentForMessage)
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.TrimSpace(lines[i]) != "" {
			msg += ": " + lines[i]
			break
		}
	}
	return &functionruntime.HandlerError{
		Terminal: status == TerminalExitStatus,
		Type:     "exit",
		Message:  msg,
		ExitCode: status,
	}
}

// recentForMessage is how many recent lines are searched for a non-empty
// one to use as a failure message.
const recentForMessage = 4

// readBounded reads a file of at most limit bytes; a missing file is empty.
func readBounded(path string, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &functionruntime.HandlerError{Type: "OutputUnreadable", Message: err.Error()}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, &functionruntime.HandlerError{Type: "OutputUnreadable", Message: err.Error()}
	}
	if st.Size() > int64(limit) {
		return nil, &functionruntime.HandlerError{
			Type:    "OutputTooLarge",
			Message: fmt.Sprintf("%s is %d bytes, more than the %d allowed", filepath.Base(path), st.Size(), limit),
		}
	}
	if st.Size() == 0 {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, &functionruntime.HandlerError{Type: "OutputUnreadable", Message: err.Error()}
	}
	if len(b) > limit {
		return nil, &functionruntime.HandlerError{
			Type:    "OutputTooLarge",
			Message: fmt.Sprintf("%s grew past the %d bytes allowed", filepath.Base(path), limit),
		}
	}
	return b, nil
}

// contentType classifies the output; see the package doc.
func contentType(out []byte) string {
	switch {
	case len(out) > 0 && json.Valid(out):
		return contentJSON
	case utf8.Valid(out):
		return contentText
	default:
		return contentBinary
	}
}
