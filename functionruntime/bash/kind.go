package bash

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/fnbridge/fnbridge/functionruntime"
)

// What package kinds registers for the bash runtime kind: the handler
// grammar in the words of a configuration file, and the file a handler's
// code lives in. Kept here, beside ValidateHandler, so the grammar has one
// owner.

// configHandlerRE is file.function as the configuration explains it; the
// length bounds are ValidateHandler's.
var configHandlerRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_-]*\.[A-Za-z_][A-Za-z0-9_]*$`)

// CheckHandler checks a configured handler string: first its shape, with
// the wording a configuration error uses, then ValidateHandler's bounds, so
// a configuration never accepts a handler the adapter would refuse.
func CheckHandler(handler string) error {
	if !configHandlerRE.MatchString(handler) {
		err := fmt.Errorf("%q is not file.function (file.sh in dir; no paths, no shell characters)", handler)
		if stem, fn, ok := strings.Cut(handler, ".sh."); ok && configHandlerRE.MatchString(stem+"."+fn) {
			err = fmt.Errorf("%w: the .sh is implied, write %q", err, stem+"."+fn)
		}
		return err
	}
	return ValidateHandler(handler)
}

// SourceFiles returns the files of the handler's code inside dir: first
// file.sh, the file the worker sources, then every other .sh file under dir
// that functionruntime.SourceTree counts (the scripts it may source).
// Their content goes into the registration digest, so an edited file
// registers as a new generation.
func SourceFiles(dir, handler string) ([]string, error) {
	stem, _, err := splitHandler(handler)
	if err != nil {
		return nil, err
	}
	file := filepath.Join(dir, stem+".sh")
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
		// In the words of the handler string, as for a Python module,
		// not "stat ...: no such file or directory".
		return nil, fmt.Errorf("bash file %q not found in %s (handler %q sources %s)", stem+".sh", dir, handler, file)
	}
	return functionruntime.SourceTree(dir, file, ".sh")
}
