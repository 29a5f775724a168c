package restateserver

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// process is one restate-server process, the leader of its own group.
type process struct {
	cmd     *exec.Cmd
	pgid    int
	done    chan struct{} // closed once reaped
	waitErr error
	logFile *os.File
}

func startProcess(bin string, args, env []string, out io.Writer, logFile *os.File) (*process, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout = out
	cmd.Stderr = out
	// Own group so Stop reaches every process it may fork; Pdeathsig so a
	// crashed test binary does not leave a server behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &process{cmd: cmd, pgid: cmd.Process.Pid, done: make(chan struct{}), logFile: logFile}
	go func() {
		p.waitErr = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exitErr() error {
	select {
	case <-p.done:
		if p.waitErr == nil {
			return errors.New("exit status 0")
		}
		return p.waitErr
	default:
		return nil
	}
}

// stop sends TERM to the group, KILLs it after grace, and waits for the
// reaper; afterwards it KILLs the group once more in case a child outlived
// the leader.
func (p *process) stop(grace time.Duration) error {
	var result error
	select {
	case <-p.done:
	default:
		if err := syscall.Kill(-p.pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			result = fmt.Errorf("SIGTERM group %d: %w", p.pgid, err)
		}
		timer := time.NewTimer(grace)
		select {
		case <-p.done:
			timer.Stop()
		case <-timer.C:
			_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
			<-p.done
			result = fmt.Errorf("restate-server did not exit within %s of SIGTERM and was killed", grace)
		}
	}
	_ = syscall.Kill(-p.pgid, syscall.SIGKILL) // stragglers; ESRCH when none
	return result
}

// kill SIGKILLs the group and waits for the reaper.
func (p *process) kill() {
	_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
	<-p.done
}
