package functionruntime

import (
	"context"
	"path/filepath"
	"strings"

	"google.golang.org/grpc/metadata"
)

// InterpreterMetadata is the RegisterFunction metadata key naming the
// interpreter a registration's workers run, for a runtime kind whose
// adapter lets a registration choose one ([InterpreterChooser]: python): a
// path, absolute or relative to working_dir, or a command name looked up
// on the runtime's PATH. It is resolved on the runtime's host, at
// registration. Like the worker limits it travels out of band because the
// contract's messages have no field for it; without it the adapter picks
// its default.
const InterpreterMetadata = "fnbridge-interpreter"

// InterpreterChooser is an [Adapter] whose registrations may name their
// interpreter ([WorkerSpec].Interpreter).
type InterpreterChooser interface {
	// CheckInterpreter checks the form of a named interpreter before
	// anything starts; its error becomes InvalidArgument.
	CheckInterpreter(interpreter string) error
}

// interpreterOf reads the registration's interpreter from the request
// metadata; "" when it names none.
func interpreterOf(ctx context.Context, a Adapter) (string, error) {
	vals := metadata.ValueFromIncomingContext(ctx, InterpreterMetadata)
	field := InterpreterMetadata + " metadata"
	switch {
	case len(vals) == 0:
		return "", nil
	case len(vals) > 1:
		return "", invalidArgument(field, "given %d times, want once", len(vals))
	}
	ic, ok := a.(InterpreterChooser)
	if !ok {
		return "", invalidArgument(field, "the %s runtime has no interpreter a registration can choose", a.Kind())
	}
	if err := ic.CheckInterpreter(vals[0]); err != nil {
		return "", invalidArgument(field, "%v", err)
	}
	return vals[0], nil
}

// confineInterpreter applies the allowed roots to a registration's named
// interpreter: a path (relative ones taken from the confined dir) must lie
// in an allowed root once its directory's symlinks are resolved; the
// program itself may be a link (a virtual environment's bin/python links
// to its base interpreter). The returned context carries the resolved
// path, so a directory link changed after the check cannot move it. A
// command name is looked up on the runtime's own PATH and needs no root.
func (r allowedRoots) confineInterpreter(ctx context.Context, dir string) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(InterpreterMetadata)
	if len(vals) != 1 || !strings.Contains(vals[0], "/") {
		return ctx, nil // absent, a command name, or refused later
	}
	p := vals[0]
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	p = filepath.Clean(p)
	field := InterpreterMetadata + " metadata"
	realDir, err := filepath.EvalSymlinks(filepath.Dir(p))
	if err != nil {
		return nil, invalidArgument(field, "the directory of %q cannot be resolved: %v", vals[0], err)
	}
	if !r.contains(realDir) {
		return nil, invalidArgument(field, "%q is in %q, which is not within an allowed root (%s)", vals[0], realDir, strings.Join(r, ", "))
	}
	md = md.Copy()
	md.Set(InterpreterMetadata, filepath.Join(realDir, filepath.Base(p)))
	return metadata.NewIncomingContext(ctx, md), nil
}
