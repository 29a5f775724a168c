package main

import (
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// separateOperands rewrites the command line args of root so that an
// operand spelled like a negative number (a JSON payload such as -5 or
// -1.5e3, a duration such as -5s) reaches its command as an operand: the
// flag parser would read it as shorthand flags ("unknown shorthand flag:
// '5' in -5"), so `fnbridge state set balance -5` could not be written
// without a "--" no Restate user would think of. No command has a digit
// for a shorthand, so such a word is never a flag.
//
// A fnbridge command whose operands are data (a state name, a value, a
// payload: see dataCommand) goes further: every word that is not one of
// its flags is an operand, whatever it starts with. A name or payload the
// caller controls ("$1" of `fnbridge state set last "$1"`) such as
// --help or -x is then the data it is, never a flag that prints the help
// and exits 0 having written nothing. -h and --help are no flags there
// (`fnbridge help COMMAND` shows a command's help).
//
// The subcommand's flags keep their places (a flag's value, -1s
// included, stays with its flag), global flags before the subcommand's
// words go after them, and every operand goes after one "--".
// Args with nothing to move, or whose command parses its own flags, come
// back unchanged.
func separateOperands(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil || cmd.DisableFlagParsing {
		return args
	}
	data := dataCommand(cmd)
	if !data && !hasNegativeNumber(args) {
		return args
	}
	// The words naming the subcommand, which must lead args exactly.
	var path []string
	for c := cmd; c != root && c != nil; c = c.Parent() {
		path = append([]string{c.Name()}, path...)
	}
	// The path's words lead args, but for global flags (the root's, with
	// their values) before or between them: `bridge --log-level warn ctx
	// state set ...` names the same command, whose operands are data.
	var globals []string
	i, j := 0, 0
	for ; i < len(args) && j < len(path); i++ {
		a := args[i]
		switch {
		case a == path[j]:
			j++
		case strings.HasPrefix(a, "-") && a != "--" && flagOf(root, a) != nil:
			globals = append(globals, a)
			if takesNextArg(root, a) && i+1 < len(args) {
				i++
				globals = append(globals, args[i])
			}
		default:
			return args
		}
	}
	if j < len(path) {
		return args
	}
	rest := args[i:]
	var flags, operands []string
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		switch {
		case a == "--":
			operands = append(operands, rest[i+1:]...)
			i = len(rest)
		case negativeNumber(a) || a == "-" || !strings.HasPrefix(a, "-"):
			operands = append(operands, a)
		case data && flagOf(cmd, a) == nil:
			operands = append(operands, a)
		default:
			flags = append(flags, a)
			if takesNextArg(cmd, a) && i+1 < len(rest) {
				i++
				flags = append(flags, rest[i])
			}
		}
	}
	out := append(append(append([]string(nil), path...), globals...), flags...)
	return append(append(out, "--"), operands...)
}

// dataCommand reports whether cmd is a fnbridge command (under `bridge
// ctx`, or the fnbridge binary's root) that runs and takes operands: its
// usage names them ("state set NAME VALUE").
func dataCommand(cmd *cobra.Command) bool {
	if !cmd.Runnable() || !strings.Contains(cmd.Use, " ") {
		return false
	}
	for c := cmd; c != nil; c = c.Parent() {
		if c.Name() == "fnbridge" && !c.HasParent() || c.Name() == "ctx" && c.HasParent() && !c.Parent().HasParent() {
			return true
		}
	}
	return false
}

// flagOf is the flag of cmd (its own or inherited) that the word a
// ("--name", "--name=value" or "-n") names, nil for none; help is none.
func flagOf(cmd *cobra.Command, a string) *pflag.Flag {
	var f *pflag.Flag
	if name, ok := strings.CutPrefix(a, "--"); ok {
		name, _, _ = strings.Cut(name, "=")
		if f = cmd.Flags().Lookup(name); f == nil {
			f = cmd.InheritedFlags().Lookup(name)
		}
	} else if len(a) == 2 {
		if f = cmd.Flags().ShorthandLookup(a[1:]); f == nil {
			f = cmd.InheritedFlags().ShorthandLookup(a[1:])
		}
	}
	if f != nil && f.Name == "help" {
		return nil
	}
	return f
}

// hasNegativeNumber reports whether a word of args before any "--" is
// spelled like a negative number.
func hasNegativeNumber(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if negativeNumber(a) {
			return true
		}
	}
	return false
}

// negativeNumber reports whether a starts like a negative number: "-"
// then a digit, or "-." then a digit.
func negativeNumber(a string) bool {
	if len(a) < 2 || a[0] != '-' {
		return false
	}
	if a[1] == '.' && len(a) > 2 {
		return a[2] >= '0' && a[2] <= '9'
	}
	return a[1] >= '0' && a[1] <= '9'
}

// takesNextArg reports whether the flag word a of cmd ("--name" or "-n",
// without "=value") takes the next word as its value.
func takesNextArg(cmd *cobra.Command, a string) bool {
	name, ok := strings.CutPrefix(a, "--")
	if !ok {
		short := a[1:]
		if len(short) != 1 {
			return false // -abc: a group of shorthands, or -kVALUE
		}
		f := cmd.Flags().ShorthandLookup(short)
		if f == nil {
			f = cmd.InheritedFlags().ShorthandLookup(short)
		}
		return f != nil && f.NoOptDefVal == ""
	}
	if strings.Contains(name, "=") {
		return false
	}
	f := cmd.Flags().Lookup(name)
	if f == nil {
		f = cmd.InheritedFlags().Lookup(name)
	}
	return f != nil && f.NoOptDefVal == ""
}
