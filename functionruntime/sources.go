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
// it follows dir itself when it is a symbolic link (a current -> release
// layout) but no symbolic link to a directory below it. The paths are
// under dir as given. Past MaxSourceFiles files or MaxSourceBytes bytes,
// it returns main alone with an error wrapping ErrTooManySources, which
// names dir: the caller may go on with main alone and say so.
func SourceTree(dir, main, ext string) ([]string, error) {
	files := []string{main}
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	main = filepath.Clean(main)
	var total int64
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == root {
				return err
			}
			return nil // unreadable below dir: not code the worker can load either
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && notSourceDir(path, name) {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ext) {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return nil
		}
		if path = filepath.Join(dir, rel); path == main {
			return nil
		}
		info, err := os.Stat(path) // a symbolic link counts as what it names
		if err != nil || !info.Mode().IsRegular() {
			return nil
		}
		files = append(files, path)
		total += info.Size()
		if len(files) > MaxSourceFiles || total > MaxSourceBytes {
			return ErrTooManySources
		}
		return nil
	})
	if errors.Is(err, ErrTooManySources) {
		return files[:1], fmt.Errorf("%w: the handler's dir %s holds more than %d %s files or %d MiB of them, so only %s counts as its code (edits to the others are not seen until a restart); point dir at the functions' own directory (a virtualenv inside it is skipped)",
			ErrTooManySources, dir, MaxSourceFiles, ext, MaxSourceBytes>>20, filepath.Base(main))
	}
	if err != nil {
		return nil, err
	}
	slices.Sort(files[1:])
	return files, nil
}

// notSourceDir is SourceTree's rule for the directories below dir that
// hold no code of the functions' own.
func notSourceDir(path, name string) bool {
	if strings.HasPrefix(name, ".") || name == "__pycache__" || name == "node_modules" || name == "site-packages" {
		return true
	}
	_, err := os.Stat(filepath.Join(path, "pyvenv.cfg"))
	return err == nil
}

// SourceDirs lists dir and every directory below it that SourceTree walks
// (the same skips, no symbolic link below dir followed), under dir as
// given, at most MaxSourceFiles of them: where a new source file becomes
// part of a handler's code, for a watcher (the dev loop).
func SourceDirs(dir string) []string {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil
	}
	var dirs []string
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if path != root && notSourceDir(path, d.Name()) {
			return fs.SkipDir
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return nil
		}
		if dirs = append(dirs, filepath.Join(dir, rel)); len(dirs) >= MaxSourceFiles {
			return fs.SkipAll
		}
		return nil
	})
	return dirs
}

// ErrTooManySources is what SourceTree's error wraps when dir holds more
// source than its bounds.
var ErrTooManySources = errors.New("too many source files")
