package bash

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proc"
	"github.com/fnbridge/fnbridge/internal/procstat"
)

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
	ctxCmd   string // the fnbridge command's executable; "" for none
	spec     functionruntime.WorkerSpec
	file     string // "name.sh", relative to spec.Dir
	function string
}

// session is one live bash worker.
type session struct {
	proc.Base // the process and its scratch directory
	r         *bufio.Reader
	maxOutput int
	buf       []byte // request buffer, reused
	seq       uint64 // requests sent
	key       key    // the key the worker holds for the next request
	owed      *owedD // the "D" still to come for an invocation answered by "R"
	// sent is when the current request went out (procstat.BootTicks):
	// processes of the worker's group that started by then are earlier
	// invocations' leftovers.
	sent uint64
	// inline: invocations run in the worker's own shell (WorkerSpec.Inline),
	// whose exit during one is that invocation's status; ended: it did.
	inline, ended bool
}

// key is one invocation's key (see the package doc, Wire protocol): a
// token only Go and that invocation's subshell know, then the name of its
// files, both random hex.
type key [keyLen]byte

const (
	keyLen   = 32
	tokenLen = 16
)

func newKey() key {
	var raw [keyLen / 2]byte
	_, _ = rand.Read(raw[:]) // never fails (crypto/rand)
	var k key
	hex.Encode(k[:], raw[:])
	return k
}

func (k *key) token() string { return string(k[:tokenLen]) }

// file is the path of this invocation's file of kind s (stdout), o
// (FNBRIDGE_OUTPUTS) or i (FNBRIDGE_INPUT_FILE).
func (k *key) file(dir string, kind byte) string {
	return dir + "/" + string(kind) + "." + string(k[tokenLen:])
}

type owedD struct {
	seq   uint64
	token string
}

// start resolves the handler file, launches a worker and waits until it
// sourced the file and found the function.
func (l *launcher) start(ctx context.Context) (proc.Session, error) {
	fail := func(err error) error { return fmt.Errorf("bash handler %q: %w", l.spec.Handler, err) }
	if err := l.spec.CheckDir(); err != nil {
		return nil, fail(err)
	}
	file, err := resolveFile(l.spec.Dir, l.file)
	if err != nil {
		return nil, fail(err)
	}
	tmp, err := proc.ScratchDir("bash")
	if err != nil {
		return nil, fail(fmt.Errorf("create worker scratch directory: %w", err))
	}
	// While the file is sourced these name files nobody reads; each
	// invocation gets files of its own.
	env, err := proc.BuildEnv(l.spec.Dir, l.spec.Env, map[string]string{
		proc.OutputsEnv: filepath.Join(tmp, "outputs"), InputFileEnv: filepath.Join(tmp, "input"),
	})
	if err == nil {
		env, err = proc.AddContextCommand(env, tmp, l.ctxCmd)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, fail(err)
	}
	// The bootstrap goes in a file the stub sources, not on the command
	// line: ps and audit logs show a short line. `.` reads the file whole
	// before it runs any of it, as -c did the string.
	boot := filepath.Join(tmp, "worker.bash")
	if err := os.WriteFile(boot, []byte(bootstrap), 0o400); err != nil {
		_ = os.RemoveAll(tmp)
		return nil, fail(fmt.Errorf("write worker bootstrap: %w", err))
	}
	mode := "subshell"
	if l.spec.Inline {
		mode = "inline"
	}
	p, err := proc.Start(proc.Config{
		Path:        l.exe,
		Args:        []string{"--noprofile", "--norc", "-c", bootstrapStub, "fnbridge-bash-worker", boot, file, l.function, tmp, mode},
		Dir:         l.spec.Dir,
		Env:         env,
		Logger:      l.spec.Logger,
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
		r:         bufio.NewReaderSize(p.Responses(), maxLine),
		maxOutput: l.opts.MaxOutput,
		inline:    l.spec.Inline,
	}
	if err := l.handshake(ctx, s); err != nil {
		s.Stop(l.opts.Grace)
		return nil, fail(err)
	}
	if s.inline {
		p.JobsAreChildren()
	}
	return s, nil
}

// handshake waits for "K", "E bash VERSION", "E source N", "E shadow NAME...", "E readonly",
// "E readonly LC_ALL", "E readonly TMOUT", "E cwd" or "E nofunc", then sends the first
// invocation's key.
func (l *launcher) handshake(ctx context.Context, s *session) error {
	stop := context.AfterFunc(ctx, s.P.Interrupt)
	raw, err := s.r.ReadSlice('\n')
	stop()
	line := string(raw)
	if errors.Is(err, bufio.ErrBufferFull) {
		return fmt.Errorf("worker sent a line of more than %d bytes before ready", maxLine)
	}
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("start interrupted: %w", ctx.Err())
		}
		s.Stop(l.opts.Grace) // so the exit status and last lines are known
		return fmt.Errorf("worker exited while sourcing %s (%s)%s", l.file, s.P.ExitDescription(), proc.LastLinesSuffix(s.P.RecentLines(3)))
	}
	s.P.SyncLogs()
	line = strings.TrimSuffix(line, "\n")
	switch {
	case strings.HasPrefix(line, "K "):
		s.key = newKey()
		if _, err := s.P.Requests().Write(s.key[:]); err != nil {
			return fmt.Errorf("send the first key: %w", err)
		}
		l.spec.Logger.Debug().Int("pid", s.P.Pid()).Str("bash", line[2:]).Msg("bash worker ready")
		return nil
	case strings.HasPrefix(line, "E source "):
		return fmt.Errorf("sourcing %s failed with status %s%s", l.file, line[len("E source "):], proc.LastLinesSuffix(s.P.RecentLines(3)))
	case line == "E readonly":
		return fmt.Errorf("%s makes %s, %s or one of %s readonly; the runtime sets them per invocation", l.file, ContextEnv, ContextTokenEnv, strings.Join(functionruntime.InvocationEnvNames, ", "))
	case line == "E readonly TMOUT":
		return fmt.Errorf("%s makes TMOUT readonly; the worker waits for requests with reads TMOUT would end, and gives the function TMOUT back as the file set it", l.file)
	case line == "E readonly LC_ALL" || line == "E readonly LC_CTYPE":
		v := line[len("E readonly "):]
		return fmt.Errorf("%s makes %s readonly; the worker reads its requests in the C locale and gives the function %s back as the file left it", l.file, v, v)
	case line == "E cwd":
		return fmt.Errorf("%s changes directory, and the worker could not return to its working directory after sourcing it", l.file)
	case strings.HasPrefix(line, "E shadow "):
		names := strings.Fields(line[len("E shadow "):])
		return fmt.Errorf("%s defines a function named %s, which would take the worker's own use of bash's %s: rename it", l.file, strings.Join(names, " and "), strings.Join(names, " and "))
	case line == "E nofunc":
		return fmt.Errorf("function %s is not defined in %s", l.function, l.file)
	case strings.HasPrefix(line, "E bash "):
		return fmt.Errorf("bash interpreter %s is bash %s; fnbridge needs bash %s or newer", l.exe, line[len("E bash "):], MinBashVersion)
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
			Code:     400,
			Type:     "InvalidInput",
			Message:  fmt.Sprintf("input has a NUL byte at offset %d; bash arguments cannot carry NUL bytes", i),
		}
	}
	if sc := inv.Context; sc != nil {
		if err := checkStepContext(sc); err != nil {
			return functionruntime.Result{}, err
		}
	}
	if err := checkEnv(inv.Env); err != nil {
		return functionruntime.Result{}, err
	}
	return proc.Call(ctx, w.sup, &inv.Logger, func(s *session) (functionruntime.Result, error) {
		res, err := s.invoke(ctx, inv.Input, inv.Context, inv.Env)
		var ds *proc.DiscardSession
		if s.ended && !errors.As(err, &ds) {
			// An inline invocation that ended the worker's shell: its
			// outcome stands, and the next invocation gets a fresh worker.
			err = &proc.DiscardSession{Err: err}
		}
		return res, err
	})
}

// Close kills the worker's process group and reaps it.
func (w *worker) Close() error { return w.sup.Close() }

// maxContextRecord bounds "<address> <token>[ fresh]" in a request (4
// digits).
const maxContextRecord = 9999

// freshWord ends the context record of an attempt that replays nothing
// (StepContext.Fresh): the fnbridge shell function then sends each
// step's start ahead of its CMD (see __fnb_run).
const freshWord = " fresh"

// checkStepContext makes sure the step context fits the request: two
// non-empty words of printable ASCII or UTF-8, without spaces.
func checkStepContext(sc *functionruntime.StepContext) error {
	bad := func(r rune) bool { return r <= ' ' || r == 0x7f }
	if sc.Address == "" || sc.Token == "" || len(sc.Address)+1+len(sc.Token)+len(freshWord) > maxContextRecord ||
		strings.ContainsFunc(sc.Address, bad) || strings.ContainsFunc(sc.Token, bad) {
		return fmt.Errorf("bash: step context address and token must be non-empty, without spaces or control characters, and %d bytes together at most", maxContextRecord-1-len(freshWord))
	}
	return nil
}

// maxEnvEntry bounds one "NAME=VALUE" of the request's environment
// record (5 digits of length).
const maxEnvEntry = 99999

// checkEnv makes sure the per-invocation environment fits the request:
// at most 9 entries (1 digit of count) of names the worker exports, each
// within its 5-digit length and without NUL bytes, which bash cannot hold.
func checkEnv(env map[string]string) error {
	if len(env) > 9 {
		return fmt.Errorf("bash: %d per-invocation environment variables; at most 9 fit a request", len(env))
	}
	for k, v := range env {
		if !slices.Contains(functionruntime.InvocationEnvNames, k) || len(k)+1+len(v) > maxEnvEntry || strings.ContainsRune(v, 0) {
			return fmt.Errorf("bash: per-invocation environment variable %q is not allowed, too long or holds a NUL byte", k)
		}
	}
	return nil
}

// appendEnvRecord appends the request's environment record: the count as
// 1 digit, then each entry's length as 5 digits and NAME=VALUE, sorted by
// name so that the bytes do not depend on map order.
func appendEnvRecord(b []byte, env map[string]string) []byte {
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	slices.Sort(names)
	b = fmt.Appendf(b, "%d", len(names))
	for _, k := range names {
		b = fmt.Appendf(b, "%05d%s=%s", len(k)+1+len(env[k]), k, env[k])
	}
	return b
}

// maxLine bounds a line from the worker; a longer one is a protocol
// error, so nothing writing to the response pipe can make Go buffer
// without bound.
const maxLine = 4096

// invoke writes the payload file, sends the request (with the step
// context sc and the per-invocation environment env, when set, and the
// next invocation's key after it), waits for the status and collects the
// output.
func (s *session) invoke(ctx context.Context, input []byte, sc *functionruntime.StepContext, env map[string]string) (functionruntime.Result, error) {
	cur, next := s.key, newKey()
	s.seq++
	stdout, outsFile, inFile := cur.file(s.Tmp, 's'), cur.file(s.Tmp, 'o'), cur.file(s.Tmp, 'i')
	// Go writes the payload file before the request, so it is complete
	// when the function starts.
	if err := writeFile(inFile, input); err != nil {
		// The worker's scratch directory is unusable (removed by a
		// /dev/shm cleaner, a full tmpfs): the function never ran, and only
		// a fresh worker, with a fresh directory, can run it.
		return functionruntime.Result{}, &proc.ProtocolError{Err: fmt.Errorf("the worker's scratch directory is unusable: %w", err)}
	}
	s.buf = append(s.buf[:0], cur[:tokenLen]...)
	switch {
	case sc == nil && len(env) == 0:
		s.buf = fmt.Appendf(s.buf, "%012d", len(input))
	case len(env) == 0:
		s.buf = fmt.Appendf(s.buf, "c%011d", len(input))
	case sc == nil:
		s.buf = fmt.Appendf(s.buf, "e%011d", len(input))
	default:
		s.buf = fmt.Appendf(s.buf, "b%011d", len(input))
	}
	if sc != nil {
		fresh := ""
		if sc.Fresh {
			fresh = freshWord
		}
		s.buf = fmt.Appendf(s.buf, "%04d%s %s%s", len(sc.Address)+1+len(sc.Token)+len(fresh), sc.Address, sc.Token, fresh)
	}
	if len(env) > 0 {
		s.buf = appendEnvRecord(s.buf, env)
	}
	var err error
	s.sent = procstat.BootTicks()
	if len(input) <= 64<<10 {
		s.buf = append(s.buf, input...)
		s.buf = append(s.buf, next[:]...)
		_, err = s.P.Requests().Write(s.buf)
	} else if _, err = s.P.Requests().Write(s.buf); err == nil {
		if _, err = s.P.Requests().Write(input); err == nil {
			_, err = s.P.Requests().Write(next[:])
		}
	}
	s.key = next
	if err != nil {
		_ = os.Remove(inFile)
		return functionruntime.Result{}, &proc.ProtocolError{Err: fmt.Errorf("send payload: %w", err)}
	}
	status, err := s.readStatus(cur.token())
	_ = syscall.Unlink(inFile)
	if err != nil && s.inline {
		if code, ok := s.shellExit(ctx, err, stdout); ok {
			status, err, s.ended = code, nil, true
		}
	}
	if err != nil {
		return functionruntime.Result{}, err
	}
	// Records `fnbridge fail` left that the status does not take (a
	// subshell's failure the function handled, an EXIT trap's other exit
	// status) go with the invocation, never piling up in the directory.
	defer s.dropFailRecords(cur)
	// Collect and remove the files whatever the status; the next
	// invocation has files of its own. (Creating and removing files is
	// what an invocation costs most besides the fork, so the outputs file
	// exists only once the function writes it.)
	// One byte over the bound for the trailing newline, taken off below.
	out, outErr := takeFile(stdout, s.maxOutput, 1, "stdout")
	if outErr == errNoFile {
		// The subshell creates it before the function runs: gone, it was
		// removed under the invocation (a cleaner of the scratch
		// directory), and its output with it, which must not read as an
		// empty result.
		outErr = &functionruntime.HandlerError{Type: "OutputUnreadable", Message: "the file holding the function's stdout (" + stdout + ") was removed during the invocation: the output is lost"}
	}
	outs, outsErr := takeFile(outsFile, proc.MaxOutputsFile, 0, proc.OutputsEnv+" file")
	if outsErr == errNoFile {
		outsErr = nil // written only by a function that sets outputs
	}
	if status != 0 {
		var failed error
		var sub []byte
		if status == TerminalExitStatus {
			// `fnbridge fail` leaves its code and message here; only it
			// writes the file, and in the function's shell it always exits
			// 100. In a subshell it writes g, which counts only while its
			// message is the last line (statusError).
			if rec := takeHead(cur.file(s.Tmp, 'f'), maxFailRecord); len(rec) > 0 {
				if he := failRecord(rec); he != nil {
					s.P.SyncLogs()
					failed = he
				}
			}
			sub = takeHead(cur.file(s.Tmp, 'g'), maxFailRecord)
		}
		if failed == nil {
			failed = s.statusError(status, sc != nil, sub)
		}
		if sc != nil && len(s.P.Leftovers(s.agentPid())) > 0 {
			// The attempt is over, and no code of it may go on: a
			// background step still running would run beside the retry
			// (its completion refused, its side effects not).
			return functionruntime.Result{}, &proc.DiscardSession{Err: failed}
		}
		return functionruntime.Result{}, failed
	}
	if outErr != nil {
		return functionruntime.Result{}, outErr
	}
	out = bytes.TrimSuffix(out, []byte("\n"))
	if len(out) > s.maxOutput {
		return functionruntime.Result{}, tooLarge("stdout", len(out), s.maxOutput)
	}
	if outsErr != nil {
		return functionruntime.Result{}, outsErr
	}
	var outputs map[string]string
	if len(outs) > 0 {
		if outputs, err = proc.ParseOutputs(outs); err != nil {
			// Terminal, as the server's OUTPUTS_INVALID: the function
			// ran, and a retry would write the same outputs.
			return functionruntime.Result{}, &functionruntime.HandlerError{Terminal: true, Type: functionruntime.InvalidOutputsType, Message: err.Error()}
		}
		if len(outputs) == 0 {
			outputs = nil
		}
	}
	return functionruntime.Result{Output: out, ContentType: contentType(out), Outputs: outputs}, nil
}

// shellExit is the exit status of an inline worker that exited of itself
// during the invocation, after readStatus failed with err: the function
// called exit, tripped errexit, exec'd (a program that exits when it is
// done) or set an EXIT trap, which would have ended its subshell with
// that status. It waits for the worker's exit as long as ctx allows (an
// exec'd program closes the response pipe at once). ok is false for a
// worker a signal ended (a crash, as with subshells), one that still runs
// when ctx ends, and one that ended before the function's call began
// (stdout, the function's output file, is created as the call begins):
// an exit the function never made is no status of this invocation.
func (s *session) shellExit(ctx context.Context, err error, stdout string) (status int, ok bool) {
	if errors.Is(err, io.EOF) {
		select {
		case <-s.P.Exited():
		case <-ctx.Done():
		}
	}
	if _, err := os.Lstat(stdout); err != nil {
		return 0, false
	}
	return s.P.ExitCode()
}

// agentPid is the pid of the worker's step agent (durability: steps), or
// 0: a process that serves the worker's later invocations, not a
// leftover of one.
func (s *session) agentPid() int {
	b, err := os.ReadFile(filepath.Join(s.Tmp, "a.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// readStatus reads the status of request s.seq, whose token is token:
// "R" from its subshell, or "D" from the worker loop when the subshell
// could not report. The "D" that closes an invocation already answered by
// "R" must come first; it always arrives before the next invocation's
// lines, since the next subshell is forked only after it is written. Any
// other line, one for another request or with another token above all,
// was not written by the worker for this invocation: a protocol error,
// which ends the worker.
func (s *session) readStatus(token string) (int, error) {
	for {
		line, err := s.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return 0, &proc.ProtocolError{Err: fmt.Errorf("response line longer than %d bytes while waiting for request %d's status", maxLine, s.seq)}
		}
		if err != nil {
			return 0, &proc.ProtocolError{Err: fmt.Errorf("read status: %w", err)}
		}
		kind, seq, tok, status, ok := parseStatus(line)
		switch {
		case !ok:
			return 0, &proc.ProtocolError{Err: fmt.Errorf("malformed status line %q while waiting for request %d's status", proc.Clip(string(line), 80), s.seq)}
		case s.owed != nil:
			if kind != 'D' || seq != s.owed.seq || tok != s.owed.token {
				return 0, s.foreign(line, fmt.Sprintf("the closing D of request %d", s.owed.seq))
			}
			s.owed = nil
		case seq != s.seq || tok != token:
			return 0, s.foreign(line, fmt.Sprintf("request %d's status", s.seq))
		case kind == 'R':
			s.owed = &owedD{seq: seq, token: token}
			return status, nil
		default:
			return status, nil
		}
	}
}

// foreign is the protocol error for a well-formed status line that is not
// the one expected: written by a process other than the worker's own
// reporting (the token is unknown outside it), or stale.
func (s *session) foreign(line []byte, want string) error {
	return &proc.ProtocolError{Err: fmt.Errorf(
		"status line %q is not %s (a process other than the worker wrote to its response pipe); worker stopped, its answer is not trusted",
		proc.Clip(strings.TrimSuffix(string(line), "\n"), 80), want)}
}

// parseStatus parses "R|D <seq> <token> <status>\n".
func parseStatus(line []byte) (kind byte, seq uint64, token string, status int, ok bool) {
	f := strings.Fields(string(line))
	if len(f) != 4 || len(f[0]) != 1 || (f[0][0] != 'R' && f[0][0] != 'D') || len(f[2]) != tokenLen {
		return 0, 0, "", 0, false
	}
	seq, err1 := strconv.ParseUint(f[1], 10, 64)
	status, err2 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil || status < 0 || status > 255 || !strings.HasSuffix(string(line), "\n") {
		return 0, 0, "", 0, false
	}
	return f[0][0], seq, f[2], status, true
}

// statusError turns a non-zero status into a HandlerError whose message is
// "exit status N: " and the last non-empty stderr line of the invocation.
// A terminal failure's message is that line alone ("exit status 100" when
// there is none): it is the message the invocation fails with, as a Python
// TerminalError's. With a step context, status 75 ([AttemptEndedStatus])
// after a fnbridge call said the attempt ended means that.
func (s *session) statusError(status int, steps bool, sub []byte) error {
	// Everything the invocation printed is on the log pipe by now; log it
	// so the last line is known.
	s.P.SyncLogs()
	msg := fmt.Sprintf("exit status %d", status)
	if status > 128 && status < 128+65 {
		msg += " (" + syscall.Signal(status-128).String() + ")"
	}
	lines := s.P.RecentLines(recentForMessage)
	for i := len(lines) - 1; i >= 0; i-- {
		// Bash's own word on the killed subshell ("line N: PID Killed
		// ( __fnb_invocation )") is the worker's, not the function's, and
		// under set -x its traces (of the exit, of r= after a failed
		// r=$(...)) say nothing.
		if l := strings.TrimSpace(lines[i]); l != "" && !strings.HasSuffix(l, "( __fnb_invocation )") && !isTrace(l) {
			if left := s.P.LeftoversBefore(s.sent, s.agentPid()); len(left) > 0 {
				// Their stderr is the same stream: the line may be theirs,
				// another caller's, which must not become this failure.
				msg += fmt.Sprintf(" (its last stderr line is withheld: processes earlier invocations left running write to the same stream, pid %s)", joinPids(left))
				break
			}
			if status == TerminalExitStatus {
				msg = lines[i]
				if he := failRecord(sub); he != nil && lastLine(he.Message) == l {
					// A subshell's fnbridge fail whose message the function
					// passed on at once (r=$(check) || exit): its code too.
					return he
				}
			} else {
				msg += ": " + lines[i]
			}
			break
		}
	}
	if steps && status == AttemptEndedStatus && saidStop(lines) {
		return &functionruntime.HandlerError{Type: functionruntime.AttemptEndedType, Message: "the step context ended the attempt: " + msg, ExitCode: status}
	}
	return &functionruntime.HandlerError{
		Terminal: status == TerminalExitStatus,
		Type:     "exit",
		Message:  msg,
		ExitCode: status,
	}
}

// dropFailRecords removes the fnbridge fail records of the invocation of
// key k, if any are left.
func (s *session) dropFailRecords(k key) {
	_ = syscall.Unlink(k.file(s.Tmp, 'f'))
	_ = syscall.Unlink(k.file(s.Tmp, 'g'))
}

// lastLine is the last non-empty line of text, trimmed.
func lastLine(text string) string {
	text = strings.TrimSpace(text)
	return strings.TrimSpace(text[strings.LastIndexByte(text, '\n')+1:])
}

// joinPids is up to four pids, comma-separated, and how many more.
func joinPids(pids []int) string {
	var b strings.Builder
	for i, pid := range pids {
		if i == 4 {
			fmt.Fprintf(&b, " and %d more", len(pids)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(pid))
	}
	return b.String()
}

// isTrace reports whether line is xtrace's for an exit or for an empty
// assignment ("+ exit 100", "++ builtin exit", "+ r="), with bash's
// default PS4: under set -x, the shell narrating r=$(check) || exit after
// the subshell's message, never a message. (A message of the function's
// may start with "+ " and even "+ n=3 ...", so nothing wider is skipped.)
func isTrace(line string) bool {
	rest := strings.TrimLeft(line, "+")
	if len(rest) == len(line) || !strings.HasPrefix(rest, " ") {
		return false
	}
	rest = strings.TrimPrefix(rest, " ")
	if code, ok := strings.CutPrefix(strings.TrimPrefix(rest, "builtin "), "exit"); ok {
		return strings.Trim(strings.TrimPrefix(code, " "), "0123456789") == ""
	}
	name, ok := strings.CutSuffix(rest, "=")
	return ok && name != "" && strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == "" && (name[0] < '0' || name[0] > '9')
}

// saidStop reports whether a fnbridge call of the invocation exited 75
// because its attempt had ended: it printed the endpoint's "... must stop
// now" (bridge/stepctx). A function's own exit 75 is an ordinary status.
func saidStop(lines []string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, "fnbridge: ") && strings.Contains(l, "must stop now") {
			return true
		}
	}
	return false
}

// maxFailRecord bounds what `fnbridge fail` records: its code and message.
const maxFailRecord = 64 << 10

// failRecord is the terminal failure `fnbridge fail` recorded ("CODE
// MESSAGE"), nil when the record is not one (the status line's message is
// used then).
func failRecord(rec []byte) *functionruntime.HandlerError {
	codeText, msg, _ := strings.Cut(string(rec), " ")
	code, err := strconv.Atoi(codeText)
	if err != nil || code < 1 || code > 65535 {
		return nil
	}
	return &functionruntime.HandlerError{Terminal: true, Type: "fnbridge.fail", Message: msg, ExitCode: TerminalExitStatus, Code: code}
}

// takeHead reads at most limit bytes of path and removes it; nil when it
// cannot: a failure's record longer than its bound keeps its code and the
// start of its message.
func takeHead(path string, limit int) []byte {
	fd, err := openOwn(path)
	if err != nil {
		return nil
	}
	defer func() {
		_ = syscall.Close(fd)
		_ = syscall.Unlink(path)
	}()
	b := make([]byte, limit)
	n := 0
	for n < limit {
		m, err := syscall.Read(fd, b[n:])
		if err == syscall.EINTR {
			continue
		}
		if m <= 0 || err != nil {
			break
		}
		n += m
	}
	return b[:n]
}

// recentForMessage is how many recent lines are searched for a non-empty
// one to use as a failure message.
const recentForMessage = 4

// writeFile creates path holding data, mode 0600. Plain system calls,
// not os.WriteFile, whose trips through the poller are half the cost of a
// file written on every invocation.
func writeFile(path string, data []byte) error {
	fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return &os.PathError{Op: "create", Path: path, Err: err}
	}
	for len(data) > 0 && err == nil {
		var n int
		n, err = syscall.Write(fd, data)
		if err == syscall.EINTR {
			err = nil
		}
		data = data[max(n, 0):]
	}
	if cerr := syscall.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

// tooLarge is the failure of a result over its bound: terminal, as the
// function already ran and would only print as much again.
func tooLarge(what string, size, limit int) error {
	return &functionruntime.HandlerError{
		Type: functionruntime.OutputTooLargeType, Terminal: true,
		Message: fmt.Sprintf("%s is %d bytes, more than the %d allowed", what, size, limit),
	}
}

// openOwn opens for reading a file the worker wrote, which runs as this
// process's user: one the function's umask made unreadable (0777) is made
// readable first, so an extreme umask loses no record or outputs.
func openOwn(path string) (int, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err == syscall.EACCES && syscall.Chmod(path, 0o600) == nil {
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	}
	return fd, err
}

// errNoFile is takeFile's answer for a file that does not exist.
var errNoFile = errors.New("no such file")

// takeFile reads a file of at most limit (and slack) bytes and removes it;
// a missing one is errNoFile, a larger one a terminal failure naming what
// it holds and limit. Plain system calls, as in writeFile: every invocation
// takes two files (stdout, and FNBRIDGE_OUTPUTS, which usually does not
// exist), and os.Open and os.Remove cost twice the calls.
func takeFile(path string, limit, slack int, what string) ([]byte, error) {
	fd, err := openOwn(path)
	if err == syscall.ENOENT {
		return nil, errNoFile
	}
	if err != nil {
		return nil, &functionruntime.HandlerError{Type: "OutputUnreadable", Message: (&os.PathError{Op: "open", Path: path, Err: err}).Error()}
	}
	defer func() {
		_ = syscall.Close(fd)
		_ = syscall.Unlink(path)
	}()
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, &functionruntime.HandlerError{Type: "OutputUnreadable", Message: (&os.PathError{Op: "stat", Path: path, Err: err}).Error()}
	}
	if st.Size > int64(limit+slack) {
		return nil, tooLarge(what, int(min(st.Size, math.MaxInt)), limit)
	}
	if st.Size == 0 {
		return nil, nil
	}
	// What the file holds now: a background job still writing to it
	// cannot hold the invocation up. One byte more than the limit tells a
	// file that grew past it.
	b := make([]byte, 0, min(int(st.Size)+1, limit+slack+1))
	for len(b) < cap(b) {
		n, err := syscall.Read(fd, b[len(b):cap(b)])
		if n > 0 {
			b = b[:len(b)+n]
			if int64(len(b)) == st.Size {
				break
			}
			continue
		}
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &functionruntime.HandlerError{Type: "OutputUnreadable", Message: (&os.PathError{Op: "read", Path: path, Err: err}).Error()}
		}
		break // end of file
	}
	if len(b) > limit+slack {
		return nil, &functionruntime.HandlerError{
			Type: functionruntime.OutputTooLargeType, Terminal: true,
			Message: fmt.Sprintf("%s grew past the %d bytes allowed", what, limit),
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
