// Package kinds owns the table of runtime kinds fnbridge can run: for each
// kind, its name as configuration and flags spell it, the adapter that runs
// it, the handler grammar a configuration must follow, and the files a
// registration digest covers. The bridge's configuration, its embedded
// runtimes and `bridge runtime serve` all read this one table, so adding a
// runtime kind is one entry in table (plus its adapter package).
package kinds

import (
	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/bash"
	"github.com/fnbridge/fnbridge/functionruntime/python"
)

// Kind is one runtime kind.
type Kind struct {
	// Name is the kind as configuration and flags spell it, and what its
	// adapter's Kind method returns.
	Name string
	// New builds the kind's adapter with its default options.
	New func() functionruntime.Adapter
	// CheckHandler checks a configured handler string; its error says what
	// shape the kind wants, without naming the configuration field.
	CheckHandler func(handler string) error
	// HandlerForm is the handler string's shape, for a message about a
	// missing one ("module.function").
	HandlerForm string
	// SourceFiles lists, in a fixed order, the files inside dir holding the
	// handler's code: their content goes into the registration digest.
	SourceFiles func(dir, handler string) ([]string, error)
	// SourceExt is the extension of the kind's source files (".py"): a
	// dev loop watches new files with it where SourceFiles cannot name
	// the handler's own.
	SourceExt string
	// JSONInputOnly: the adapter takes JSON input only (application/json
	// or a type ending in +json) and fails any other content type, so a
	// handler of the kind may not declare another.
	JSONInputOnly bool
}

// table is every runtime kind, in the order messages list them.
var table = []Kind{
	{
		Name: python.Kind,
		// The worker refuses a return value over the server's output
		// bound itself, so its message names the bound that applies.
		New: func() functionruntime.Adapter {
			return python.New(python.Options{MaxOutput: functionruntime.DefaultMaxOutputBytes})
		},
		CheckHandler:  python.CheckHandler,
		HandlerForm:   "module.function",
		SourceFiles:   python.SourceFiles,
		SourceExt:     ".py",
		JSONInputOnly: true,
	},
	{
		Name: bash.Kind,
		// As for Python: the adapter's bound is the server's, so an
		// output over it is refused naming that bound.
		New: func() functionruntime.Adapter {
			return bash.New(bash.Options{MaxOutput: functionruntime.DefaultMaxOutputBytes})
		},
		CheckHandler: bash.CheckHandler,
		HandlerForm:  "file.function, file.sh in dir",
		SourceFiles:  bash.SourceFiles,
		SourceExt:    ".sh",
	},
}

// Lookup returns the kind called name.
func Lookup(name string) (Kind, bool) {
	for _, k := range table {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
}

// Names lists every kind's name, in the table's order.
func Names() []string {
	names := make([]string, len(table))
	for i, k := range table {
		names[i] = k.Name
	}
	return names
}
