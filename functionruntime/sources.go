package functionruntime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Bounds of a handler's source tree (SourceTree): far above a directory
// of functions, far below a virtualenv or a whole checkout, which a
// handler's dir should not be.
const (
	MaxSourceFiles = 1000
	MaxSourceBytes = 16 << 20
)

// SourceTree lists the files a handler's code may come from: main (the
// module or script the worker loads) first, then every other file under
// dir whose name ends in ext (".py", ".sh"), in lexical order, so a helper
// module it imports or a library script it sources is part of its
// registration's identity too. It skips what is not the functions' own
// code: hidden directories (.git, .venv), __pycache__, node_modules,
// site-packages and every virtualenv (a directory holding pyvenv.cfg), and
// it does not follow symbolic links to directories. More than
// MaxSourceFiles files or MaxSourceBytes bytes is an error naming dir.
func SourceTree(dir, main, ext string) ([]string, error) {
	files := []string{main}
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			return nil // unreadable below dir: not code the worker can load either
		}
		name := d.Name()
		if d.IsDir() {
			if path == dir {
				return nil
			}
			if strings.HasPrefix(name, ".") || name == "__pycache__" || name == "node_modules" || name == "site-packages" {
				return fs.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "pyvenv.cfg")); err == nil {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ext) || path == main {
			return nil
		}
		info, err := os.Stat(path) // a symbolic link counts as what it names
		if err != nil || !info.Mode().IsRegular() {
			return nil
		}
		files = append(files, path)
		total += info.Size()
		if len(files) > MaxSourceFiles || total > MaxSourceBytes {
			return errTooManySources
		}
		return nil
	})
	if errors.Is(err, errTooManySources) {
		return nil, fmt.Errorf("the handler's dir %s holds more than %d %s files or %d MiB of them, all part of its code's identity: point dir at the functions' own directory (a virtualenv inside it is skipped)",
			dir, MaxSourceFiles, ext, MaxSourceBytes>>20)
	}
	if err != nil {
		return nil, err
	}
	slices.Sort(files[1:])
	return files, nil
}

var errTooManySources = errors.New("too many source files")
