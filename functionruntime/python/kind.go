package python

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/fnbridge/fnbridge/functionruntime"
)

// What package kinds registers for the python runtime kind: the handler
// grammar in the words of a configuration file, and the file a handler's
// code lives in. Kept here, beside ValidateHandler, so the grammar has one
// owner.

// configHandlerRE is module.function as the configuration explains it; the
// length bound is ValidateHandler's.
var configHandlerRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$`)

// CheckHandler checks a configured handler string: first its shape, with
// the wording a configuration error uses, then ValidateHandler's bounds, so
// a configuration never accepts a handler the adapter would refuse.
func CheckHandler(handler string) error {
	if !configHandlerRE.MatchString(handler) {
		err := fmt.Errorf("%q is not module.function (python identifiers, module may be dotted)", handler)
		if strings.ContainsRune(handler, '/') {
			err = fmt.Errorf("%w: name the module with dots, relative to dir, without .py", err)
		}
		return err
	}
	return ValidateHandler(handler)
}

// SourceFiles returns the files of the handler's code inside dir: first
// its module, module/__init__.py for a package or else module.py (the
// order of Python's import, where a package wins over a module of the same
// name; a dotted module is a path of directories), then every other .py
// file under dir
// that functionruntime.SourceTree counts (the modules it may import).
// Their content goes into the registration digest, so an edited module or
// helper registers as a new generation.
func SourceFiles(dir, handler string) ([]string, error) {
	dot := strings.LastIndexByte(handler, '.')
	if dot <= 0 {
		return nil, fmt.Errorf("handler %q has no function part", handler)
	}
	mod := handler[:dot]
	base := filepath.Join(dir, filepath.FromSlash(strings.ReplaceAll(mod, ".", "/")))
	for _, cand := range []string{filepath.Join(base, "__init__.py"), base + ".py"} {
		if _, err := os.Stat(cand); err == nil {
			return functionruntime.SourceTree(dir, cand, ".py")
		}
	}
	err := fmt.Errorf("python module %q not found in %s (want %s.py or %s/__init__.py)", mod, dir, base, base)
	if stem, ok := strings.CutSuffix(mod, ".py"); ok {
		if _, serr := os.Stat(filepath.Join(dir, filepath.FromSlash(strings.ReplaceAll(stem, ".", "/"))+".py")); serr == nil {
			err = fmt.Errorf("%w: the .py is implied, write %q", err, stem+handler[dot:])
		}
	}
	return nil, err
}
