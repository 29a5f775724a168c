package devloop

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/rs/zerolog"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/kinds"
)

// Debounce bounds: a batch of changes is due once no relevant event came
// for quiet, or maxDelay after its first event when events keep coming.
// Editors write a save as several events (a temporary file, a rename, a
// chmod) within milliseconds.
const (
	defaultQuiet    = 150 * time.Millisecond
	defaultMaxDelay = 2 * time.Second
)

// lostEvents stands in a batch for events the kernel dropped (inotify
// queue overflow): something may have changed, so a reload checks all.
const lostEvents = "(file events lost)"

// watcher reports changes to a set of files. It watches their directories,
// not the files: an editor that saves by renaming a new file over the old
// one replaces the inode a watch on the file would follow.
type watcher struct {
	fs  *fsnotify.Watcher
	log zerolog.Logger

	quiet, maxDelay time.Duration

	mu       sync.Mutex
	files    map[string]bool            // paths whose events count
	anyIn    map[string]bool            // directories where any entry's event counts
	extIn    map[string]map[string]bool // directories where an event on a file with one of these extensions counts
	treeDirs map[string]bool            // directories of handlers' trees, where a new directory counts
	dirs     map[string]bool            // directories to watch; one removed or moved away counts
	// awaited are directories to watch that do not exist: creating one, or
	// a directory on the way to it, counts.
	awaited map[string]bool
}

func newWatcher(log zerolog.Logger) (*watcher, error) {
	fs, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	return &watcher{fs: fs, log: log, quiet: defaultQuiet, maxDelay: defaultMaxDelay,
		files: map[string]bool{}, anyIn: map[string]bool{}, extIn: map[string]map[string]bool{}, treeDirs: map[string]bool{}, dirs: map[string]bool{}, awaited: map[string]bool{}}, nil
}

func (w *watcher) close() error { return w.fs.Close() }

// watchSpec is what the dev loop watches.
type watchSpec struct {
	files []string // files whose events count
	anyIn []string // directories where any entry's event counts
	// sources are the handlers' source files: their events count, and so
	// do those of any new file of the same language beside them (a helper
	// module just created, which the next reload makes part of the
	// handler's code).
	sources []string
	// trees are the handlers' dirs with their language's extension: a
	// new file of that language in any directory SourceTree walks is a
	// change, and so is a new directory there (watched from the reload
	// it makes on), as the digest covers them.
	trees []tree
}

// tree is one handler's dir and its sources' extension (".py", ".sh").
type tree struct{ dir, ext string }

// watchSet is what a configuration makes the dev loop watch: the file
// itself and every handler's source files (the files its registration
// digest covers). A handler whose files cannot be named (its module does
// not exist, maybe no longer) has its whole directory watched, and its
// tree for its language's files, so creating the file is seen.
func watchSet(cfg *bridge.Config) watchSpec {
	ws := watchSpec{files: []string{cfg.Path}}
	addTree := func(t tree) {
		if !slices.Contains(ws.trees, t) {
			ws.trees = append(ws.trees, t)
		}
	}
	for _, svc := range cfg.Services {
		for i := range svc.Handlers {
			h := &svc.Handlers[i]
			src, err := h.SourceFiles()
			if err != nil && !errors.Is(err, functionruntime.ErrTooManySources) {
				ws.anyIn = append(ws.anyIn, h.Dir)
				if k, ok := kinds.Lookup(h.Runtime); ok && k.SourceExt != "" {
					addTree(tree{h.Dir, k.SourceExt})
				}
				continue
			}
			ws.sources = append(ws.sources, src...)
			if err == nil && len(src) > 0 {
				// Beyond the bound only main counts: nothing else to see.
				addTree(tree{h.Dir, filepath.Ext(src[0])})
			}
		}
	}
	return ws
}

// and is ws with o's files and directories added.
func (ws watchSpec) and(o watchSpec) watchSpec {
	return watchSpec{
		files:   slices.Concat(ws.files, o.files),
		anyIn:   slices.Concat(ws.anyIn, o.anyIn),
		sources: slices.Concat(ws.sources, o.sources),
		trees:   slices.Concat(ws.trees, o.trees),
	}
}

// set replaces the watched files and directories. A directory that does
// not exist is awaited: its nearest existing ancestor is watched for it.
// One that cannot be watched otherwise is logged and skipped.
func (w *watcher) set(spec watchSpec) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.files, w.anyIn, w.extIn, w.treeDirs = map[string]bool{}, map[string]bool{}, map[string]map[string]bool{}, map[string]bool{}
	dirs := map[string]bool{}
	addExt := func(d, ext string) {
		if w.extIn[d] == nil {
			w.extIn[d] = map[string]bool{}
		}
		w.extIn[d][ext] = true
	}
	for _, t := range spec.trees {
		for _, d := range functionruntime.SourceDirs(t.dir) {
			d = filepath.Clean(d)
			addExt(d, t.ext)
			w.treeDirs[d] = true
			dirs[d] = true
		}
	}
	for _, f := range append(slices.Clip(spec.files), spec.sources...) {
		f = filepath.Clean(f)
		w.files[f] = true
		dirs[filepath.Dir(f)] = true
	}
	for _, f := range spec.sources {
		d, ext := filepath.Dir(filepath.Clean(f)), filepath.Ext(f)
		if ext == "" {
			continue
		}
		addExt(d, ext)
	}
	for _, d := range spec.anyIn {
		d = filepath.Clean(d)
		w.anyIn[d] = true
		dirs[d] = true
	}
	w.dirs, w.awaited = maps.Clone(dirs), map[string]bool{}
	// fsnotify's list, not a record of what was added: the kernel drops
	// the watch of a directory removed or moved away (fsnotify forgets it
	// as it reads that event, which relevant counts), so the directory
	// made again at that path is added afresh.
	keep := map[string]bool{}
	for _, d := range w.fs.WatchList() {
		keep[d] = false
	}
	for d := range dirs {
		if _, ok := keep[d]; ok {
			keep[d] = true
			continue
		}
		err := w.fs.Add(d)
		if err == nil {
			keep[d] = true
			continue
		}
		if !errors.Is(err, os.ErrNotExist) {
			w.log.Warn().Err(err).Str("dir", d).Msg("cannot watch directory; changes in it are not seen")
			continue
		}
		w.awaited[d] = true
		if a := w.watchAncestor(d, keep); a != "" {
			keep[a] = true
			w.dirs[a] = true // its removal or move is a change too: d's way goes with it
		}
	}
	// Removed only now: a directory watched before and still wanted
	// (perhaps as an ancestor) is never unwatched in between.
	for d, kept := range keep {
		if !kept {
			_ = w.fs.Remove(d)
		}
	}
}

// watchAncestor watches the nearest existing ancestor of the missing
// directory d, where its making starts, and returns it ("" if none can
// be watched). watching holds the directories already watched.
func (w *watcher) watchAncestor(d string, watching map[string]bool) string {
	for a := filepath.Dir(d); ; a = filepath.Dir(a) {
		if _, ok := watching[a]; ok {
			return a
		}
		err := w.fs.Add(a)
		if err == nil {
			return a
		}
		if !errors.Is(err, os.ErrNotExist) || a == filepath.Dir(a) {
			w.log.Warn().Err(err).Str("dir", d).Msg("cannot watch directory, nor where it would be made; changes in it are not seen")
			return ""
		}
	}
}

// relevant reports whether an event may change what is served: a write,
// creation, removal or rename of a watched file, or of a new file of a
// handler's language beside its sources (a chmod alone does not); the
// removal or move of a watched directory, whose watch went with it; the
// making of an awaited directory, or of one on the way to it.
func (w *watcher) relevant(ev fsnotify.Event) bool {
	if ev.Op&^fsnotify.Chmod == 0 {
		return false
	}
	name := filepath.Clean(ev.Name)
	w.mu.Lock()
	defer w.mu.Unlock()
	dir := filepath.Dir(name)
	if w.files[name] || w.anyIn[dir] || w.extIn[dir][filepath.Ext(name)] {
		return true
	}
	if ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 && w.dirs[name] {
		return true
	}
	if ev.Op&fsnotify.Create != 0 {
		for d := range w.awaited {
			if d == name || strings.HasPrefix(d, name+string(filepath.Separator)) {
				return true
			}
		}
	}
	// A directory made (or moved) into a handler's tree may hold or get
	// sources; the reload it starts watches it.
	if ev.Op&(fsnotify.Create|fsnotify.Rename) != 0 && w.treeDirs[dir] {
		if st, err := os.Stat(name); err == nil && st.IsDir() {
			return true
		}
	}
	return false
}

// errClosed is next's error once the watcher is closed.
var errClosed = errors.New("file watcher closed")

// next waits for the next batch of changes and returns the paths changed,
// sorted: the first relevant event opens a batch, which is due once the
// events have been quiet for a while (or at the latest maxDelay after the
// first), so one save makes one batch.
func (w *watcher) next(ctx context.Context) ([]string, error) {
	b := batch{quiet: w.quiet, maxDelay: w.maxDelay}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		var due <-chan time.Time
		if b.pending() {
			due = timer.C
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case ev, ok := <-w.fs.Events:
			if !ok {
				return nil, errClosed
			}
			if !w.relevant(ev) {
				continue
			}
			b.add(filepath.Clean(ev.Name), time.Now())
		case err, ok := <-w.fs.Errors:
			if !ok {
				return nil, errClosed
			}
			w.log.Warn().Err(err).Msg("file watcher")
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				b.add(lostEvents, time.Now())
			}
		case now := <-due:
			if !now.Before(b.deadline()) {
				return b.take(), nil
			}
		}
		if b.pending() {
			timer.Reset(time.Until(b.deadline()))
		}
	}
}

// batch collects the paths of one burst of events.
type batch struct {
	quiet, maxDelay time.Duration
	first, last     time.Time
	paths           []string
}

func (b *batch) pending() bool { return len(b.paths) > 0 }

func (b *batch) add(path string, now time.Time) {
	if !b.pending() {
		b.first = now
	}
	b.last = now
	if !slices.Contains(b.paths, path) {
		b.paths = append(b.paths, path)
	}
}

// deadline is when the pending batch is due.
func (b *batch) deadline() time.Time {
	return minTime(b.last.Add(b.quiet), b.first.Add(b.maxDelay))
}

func minTime(a, c time.Time) time.Time {
	if a.Before(c) {
		return a
	}
	return c
}

// take returns the batch's paths, sorted, and empties it.
func (b *batch) take() []string {
	paths := b.paths
	sort.Strings(paths)
	b.paths = nil
	return paths
}
