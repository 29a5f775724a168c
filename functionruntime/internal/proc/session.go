package proc

import (
	"os"
	"sync"
	"time"
)

// Base is the part of a [Session] both adapters share: the worker process
// and its scratch directory, which is removed once the process group is
// gone, so a handler still writing there is not raced.
type Base struct {
	P   *Process
	Tmp string // the worker's scratch directory (see [ScratchDir])

	stopOnce sync.Once
}

// Proc returns the worker process.
func (b *Base) Proc() *Process { return b.P }

// Stop terminates the process group (see [Process.Terminate]), then
// removes the scratch directory. Only the first call does anything.
func (b *Base) Stop(grace time.Duration) {
	b.stopOnce.Do(func() {
		b.P.Terminate(grace)
		_ = os.RemoveAll(b.Tmp)
	})
}
