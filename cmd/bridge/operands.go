package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// numbersAsOperands rewrites the command line args of root so that an
// operand spelled like a negative number (a JSON payload such as -5 or
// -1.5e3, a duration such as -5s) reaches its command as an operand: the
// flag parser would read it as shorthand flags ("unknown shorthand flag:
// '5' in -5"), so `fnbridge state set balance -5` could not be written
// without a "--" no Restate user would think of. No command has a digit
// for a shorthand, so such a word is never a flag. The subcommand's flags
// keep their places (a flag's value, -1s included, stays with its flag)
// and every operand goes after one "--". Args without such a word, or
// whose command parses its own flags, come back unchanged.
func numbersAsOperands(root *cobra.Command, args []string) []string {
	if !hasNegativeNumber(args) {
		return args
	}
	cmd, _, err := root.Find(args)
	if err != nil || cmd.DisableFlagParsing {
		return args
	}
	// The words naming the subcommand, which must lead args exactly.
	var path []string
	for c := cmd; c != root && c != nil; c = c.Parent() {
		path = append([]string{c.Name()}, path...)
	}
	if len(path) > len(args) {
		return args
	}
	for i, w := range path {
		if args[i] != w {
			return args
		}
	}
	rest := args[len(path):]
	var flags, operands []string
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		switch {
		case a == "--":
			operands = append(operands, rest[i+1:]...)
			i = len(rest)
		case negativeNumber(a) || a == "-" || !strings.HasPrefix(a, "-"):
			operands = append(operands, a)
		default:
			flags = append(flags, a)
			if takesNextArg(cmd, a) && i+1 < len(rest) {
				i++
				flags = append(flags, rest[i])
			}
		}
	}
	out := append(append([]string(nil), path...), flags...)
	return append(append(out, "--"), operands...)
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
