package bridge

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// ConfigError is every problem found in one configuration file, each
// naming where it is, in the file's words: its line and field path,
// never a Go type. It prints one problem per line, compiler style:
//
//	bridge.yaml:2: unknown field "protocl_mode", did you mean "protocol_mode"? (known here: listen, ...)
//	bridge.yaml:9: services[0].handlers[0].concurrency: want a whole number, got "abc"
type ConfigError struct {
	// File is the file as the user named it; empty for ParseConfig.
	File string
	// Problems are in the order of their lines.
	Problems []ConfigProblem
}

// ConfigProblem is one thing wrong with a configuration.
type ConfigProblem struct {
	// Line is where the problem is written (1-based); 0 when the file has
	// no line for it (a section left out entirely).
	Line int
	// Path is the field path ("services[0].handlers[1].limits.memory");
	// empty for the file's top level.
	Path string
	// Message says what is wrong and what is allowed.
	Message string

	// typed marks a value of the wrong shape: the field holds nothing, so
	// the checks of that field's content are not reported on top of it.
	typed bool
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.where(e.File))
		if p.Path != "" {
			b.WriteString(p.Path + ": ")
		}
		b.WriteString(p.Message)
	}
	return b.String()
}

// where is the "file:line: " prefix of a problem.
func (p ConfigProblem) where(file string) string {
	switch {
	case file != "" && p.Line > 0:
		return fmt.Sprintf("%s:%d: ", file, p.Line)
	case file != "":
		return file + ": "
	case p.Line > 0:
		return fmt.Sprintf("line %d: ", p.Line)
	}
	return ""
}

// maxConfigValues bounds the values one configuration decodes to. Aliases
// can make a small file expand exponentially ("billion laughs"); no real
// configuration comes near this.
const maxConfigValues = 200_000

// configDecoder decodes a parsed YAML tree into the configuration structs
// by their yaml tags, recording each field's line and reporting every
// unknown field and wrongly shaped value under its field path. It decodes
// by hand, rather than with yaml's own decoder, because that one reports
// Go types ("cannot unmarshal !!str into int") and no field paths.
type configDecoder struct {
	problems  []ConfigProblem
	lines     map[string]int      // field path → line it is written on
	nulls     map[string]bool     // field paths written as null (left out)
	expanding map[*yaml.Node]bool // anchors whose alias is being decoded
	left      int                 // values that may still be decoded
	aliasLine int                 // line of the outermost alias being decoded
}

func newConfigDecoder() *configDecoder {
	return &configDecoder{lines: map[string]int{}, nulls: map[string]bool{}, expanding: map[*yaml.Node]bool{}, left: maxConfigValues}
}

func (d *configDecoder) problem(line int, path string, typed bool, format string, args ...any) {
	d.problems = append(d.problems, ConfigProblem{Line: line, Path: path, Message: fmt.Sprintf(format, args...), typed: typed})
}

// lineOf is the line of path, or of the closest enclosing field written in
// the file (a missing field is reported where its parent is).
func (d *configDecoder) lineOf(path string) int {
	for path != "" {
		if l, ok := d.lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

// decode stores node n, found at path, into v.
func (d *configDecoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if d.left <= 0 {
		return
	}
	if d.left--; d.left == 0 {
		// Reported for the whole file, where the alias that expanded is
		// written: what is left undecoded is not worth a problem of its own.
		line := n.Line
		if d.aliasLine > 0 {
			line = d.aliasLine
		}
		d.problem(line, "", true, "the file expands to more than %d values (through aliases)", maxConfigValues)
		return
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) > 0 {
			d.decode(n.Content[0], v, path)
		}
		return
	case yaml.AliasNode:
		if n.Alias == nil || d.expanding[n.Alias] {
			d.problem(n.Line, path, true, "alias *%s refers to the value it is part of", n.Value)
			return
		}
		if len(d.expanding) == 0 {
			d.aliasLine = n.Line
		}
		d.expanding[n.Alias] = true
		d.decode(n.Alias, v, path)
		delete(d.expanding, n.Alias)
		return
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		d.nulls[path] = true
		return // left out: the field keeps its zero value, as if absent
	}
	// A value written after a null at the same path (a merge key's null,
	// then the mapping's own value) is what counts.
	delete(d.nulls, path)
	if v.CanAddr() {
		switch ptr := v.Addr().Interface().(type) {
		case yaml.Unmarshaler:
			if err := ptr.UnmarshalYAML(n); err != nil {
				d.problem(n.Line, path, true, "%s", err.Error())
			}
			return
		case encoding.TextUnmarshaler, *time.Duration:
			// As yaml decodes them: from their text ("30s" for a
			// time.Duration).
			want := "a single value"
			if _, ok := ptr.(*time.Duration); ok {
				want = "a duration like 30s or 5m"
			}
			if n.Kind != yaml.ScalarNode || n.Decode(ptr) != nil {
				d.problem(n.Line, path, true, "want %s, got %s", want, describeNode(n))
			}
			return
		}
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(n, v.Elem(), path)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Map:
		d.decodeMap(n, v, path)
	case reflect.Interface:
		// Free-form (any): whatever the file holds, as yaml decodes it.
		if err := n.Decode(v.Addr().Interface()); err != nil {
			d.problem(n.Line, path, true, "%s cannot be read", describeNode(n))
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.problem(n.Line, path, true, "want a list, got %s", describeNode(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			ip := fmt.Sprintf("%s[%d]", path, i)
			d.lines[ip] = item.Line
			d.decode(item, s.Index(i), ip)
		}
		v.Set(s)
	default:
		d.decodeScalar(n, v, path)
	}
}

// decodeScalar stores a scalar with yaml's own resolution (so 0x10, 1e3
// and true mean what YAML says), reporting a mismatch in the file's words.
func (d *configDecoder) decodeScalar(n *yaml.Node, v reflect.Value, path string) {
	want := scalarWant(v.Kind())
	if n.Kind != yaml.ScalarNode {
		d.problem(n.Line, path, true, "want %s, got %s", want, describeNode(n))
		return
	}
	whole := want == "a whole number"
	// yaml takes a quoted "yes" as true but refuses a quoted "false": a
	// switch is never text, whatever it says.
	quotedBool := v.Kind() == reflect.Bool && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0
	// yaml would truncate 2.5 into an int field: a whole number must be
	// one.
	if !quotedBool && (!whole || n.ShortTag() == "!!int") {
		if err := n.Decode(v.Addr().Interface()); err == nil {
			return
		}
	}
	got := describeNode(n)
	switch {
	case whole && (n.ShortTag() == "!!int" || n.ShortTag() == "!!float" && digitsRE.MatchString(n.Value)):
		d.problem(n.Line, path, true, "%s", wholeOutOfRange(n.Value, v.Type()))
		return
	case quotedBool || n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 && isNumberOrBool(n.Value):
		got = fmt.Sprintf("the text %s (write it without quotes)", got)
	}
	d.problem(n.Line, path, true, "want %s, got %s", want, got)
}

// wholeOutOfRange says a whole number is past what a field of type t
// holds, naming the limit: the field's own checks say what it allows
// within it.
func wholeOutOfRange(value string, t reflect.Type) string {
	bits := t.Bits()
	if t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uintptr {
		if strings.HasPrefix(value, "-") {
			return fmt.Sprintf("%s is negative: want a whole number from 0", value)
		}
		return fmt.Sprintf("%s is more than %d, the largest whole number this field holds", value, uint64(1)<<bits-1)
	}
	if strings.HasPrefix(value, "-") {
		return fmt.Sprintf("%s is less than %d, the smallest whole number this field holds", value, int64(-1)<<(bits-1))
	}
	return fmt.Sprintf("%s is more than %d, the largest whole number this field holds", value, uint64(1)<<(bits-1)-1)
}

// digitsRE is an integer too long for yaml to resolve it as one.
var digitsRE = regexp.MustCompile(`^[-+]?[0-9_]+$`)

// isNumberOrBool reports whether s, unquoted, would be a number or a boolean.
func isNumberOrBool(s string) bool {
	var probe yaml.Node
	if yaml.Unmarshal([]byte(s), &probe) != nil || len(probe.Content) != 1 {
		return false
	}
	switch probe.Content[0].ShortTag() {
	case "!!int", "!!float", "!!bool":
		return true
	}
	return false
}

// scalarWant describes what a field of kind k holds.
func scalarWant(k reflect.Kind) string {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	}
	return "a string"
}

// describeNode is what a node holds, for "got ..." messages.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		if n.Alias != nil && n.Alias.Kind != yaml.AliasNode {
			return describeNode(n.Alias)
		}
	}
	v := n.Value
	if len(v) > 64 {
		v = v[:61] + "..."
	}
	return strconv.Quote(v)
}

// decodeMap stores a mapping with free keys (env, metadata, runtimes).
func (d *configDecoder) decodeMap(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.problem(n.Line, path, true, "want a mapping (name: value), got %s", describeNode(n))
		return
	}
	if v.IsNil() {
		v.Set(reflect.MakeMap(v.Type()))
	}
	d.entries(n, v, path, "%q", func(key string, k, val *yaml.Node) {
		kp := path + "." + key
		d.lines[kp] = k.Line
		ev := reflect.New(v.Type().Elem()).Elem()
		d.decode(val, ev, kp)
		v.SetMapIndex(reflect.ValueOf(key).Convert(v.Type().Key()), ev)
	})
}

// entries applies the merge keys of mapping n (<<: *defaults) to v first,
// so the mapping's own keys win over what they bring, then calls f for
// each other key, in order, as the file writes it. A key that is not a
// scalar, or is given again, is a problem (named with what: "%q" or
// "field %q").
func (d *configDecoder) entries(n *yaml.Node, v reflect.Value, path, what string, f func(key string, k, val *yaml.Node)) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if isMergeKey(n.Content[i]) {
			d.merge(n.Content[i+1], v, path)
		}
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if isMergeKey(k) {
			continue
		}
		if k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode {
			d.problem(k.Line, path, false, "want a field name, got %s", describeNode(k))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.problem(k.Line, path, false, what+" is given twice (first on line %d)", k.Value, first)
			continue
		}
		seen[k.Value] = k.Line
		f(k.Value, k, val)
	}
}

// decodeStruct stores a mapping into a struct, one yaml-tagged field per
// key.
func (d *configDecoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	fields := fieldsOf(v.Type())
	if n.Kind != yaml.MappingNode {
		d.problem(n.Line, path, true, "want a mapping of fields (known here: %s), got %s", fields.known, describeNode(n))
		return
	}
	d.entries(n, v, path, "field %q", func(key string, k, val *yaml.Node) {
		f, ok := fields.byName[key]
		if !ok {
			d.problem(k.Line, path, false, "%s", unknownField(key, fields.names))
			return
		}
		fp := key
		if path != "" {
			fp = path + "." + key
		}
		d.lines[fp] = k.Line
		d.decode(val, v.FieldByIndex(f), fp)
	})
}

// refuseWrittenZeros reports the fields whose zero value stands for "left
// out" (their default applies) but which the file spells as 0: a user who
// writes `timeout: 0s` or `concurrency: 0` means none, or at once, and
// would silently get the default. Left out or null, the default applies.
func (d *configDecoder) refuseWrittenZeros(cfg *Config) {
	check := func(path string, zero bool, format string, args ...any) {
		if line, ok := d.lines[path]; ok && zero && !d.nulls[path] && !d.explained(path) {
			d.problem(line, path, false, format, args...)
		}
	}
	check("shutdown_timeout", cfg.ShutdownTimeout == 0, "0 is not allowed: want a positive duration (left out: %s)", Duration(DefaultShutdownTimeout))
	for si, s := range cfg.Services {
		for hi, h := range s.Handlers {
			hp := fmt.Sprintf("services[%d].handlers[%d]", si, hi)
			check(hp+".timeout", h.Timeout == 0, "0 is not allowed: want 0 < timeout <= %s (left out: %s)", Duration(MaxTimeout), Duration(DefaultTimeout))
			check(hp+".idle_timeout", h.IdleTimeout == 0, "0 is not allowed: want at least 1s (left out: %s)", Duration(DefaultIdleTimeout))
			check(hp+".concurrency", h.Concurrency == 0, "0 is not allowed: want 1..%d (left out: %d)", MaxConcurrency, DefaultConcurrency)
			check(hp+".lease_timeout", h.LeaseTimeout == 0, "0 is not allowed: want 0 < lease_timeout <= %s (left out: %s)", Duration(MaxTimeout), Duration(DefaultLeaseTimeout))
			check(hp+".inactivity_timeout", h.InactivityTimeout == 0, "0 is not allowed: want a positive duration longer than timeout + lease_timeout (left out: timeout + lease_timeout + 30s)")
			check(hp+".abort_timeout", h.AbortTimeout == 0, "0 is not allowed: want a positive duration (left out: inactivity_timeout)")
			if rp := h.RetryPolicy; rp != nil {
				check(hp+".retry_policy.initial_interval", rp.InitialInterval == 0, "0 is not allowed: want a positive interval such as 100ms (left out: Restate's default)")
				check(hp+".retry_policy.max_interval", rp.MaxInterval == 0, "0 is not allowed: want a positive interval such as 10s (left out: Restate's default)")
			}
			if h.Durability == DurabilitySteps {
				check(hp+".suspend_after", h.SuspendAfter == 0, "0 is not allowed: want a positive duration shorter than timeout (left out: %s, at most half the timeout)", Duration(DefaultSuspendAfter))
			} else {
				check(hp+".suspend_after", h.SuspendAfter == 0, "only applies with durability: steps (a function-mode handler never waits on the journal)")
			}
		}
	}
}

// isMergeKey reports whether k is YAML's merge key: a plain <<.
func isMergeKey(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && k.ShortTag() == "!!merge"
}

// merge applies the value of a merge key: a mapping, or a list of them
// where the earlier ones win.
func (d *configDecoder) merge(m *yaml.Node, v reflect.Value, path string) {
	target := m
	if m.Kind == yaml.AliasNode && m.Alias != nil {
		target = m.Alias
	}
	if target.Kind == yaml.SequenceNode {
		for i := len(target.Content) - 1; i >= 0; i-- {
			d.merge(target.Content[i], v, path)
		}
		return
	}
	if target.Kind != yaml.MappingNode {
		d.problem(m.Line, path, true, "<< merges a mapping or a list of mappings, got %s", describeNode(m))
		return
	}
	d.decode(m, v, path)
}

// structFields is what decodeStruct needs of a struct type.
type structFields struct {
	byName map[string][]int // yaml name → field index
	names  []string         // in declaration order
	known  string           // names, comma-separated, for messages
}

var fieldCache sync.Map // reflect.Type → *structFields

// fieldsOf lists a struct's yaml fields: exported, not tagged "-", named
// by the tag or the lower-cased field name; ",inline" structs lend theirs.
func fieldsOf(t reflect.Type) *structFields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*structFields)
	}
	sf := &structFields{byName: map[string][]int{}}
	var walk func(t reflect.Type, index []int)
	walk = func(t reflect.Type, index []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" {
				continue
			}
			idx := append(append([]int(nil), index...), i)
			if strings.Contains(","+opts+",", ",inline,") && f.Type.Kind() == reflect.Struct {
				walk(f.Type, idx)
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			sf.byName[name] = idx
			sf.names = append(sf.names, name)
		}
	}
	walk(t, nil)
	sf.known = strings.Join(sf.names, ", ")
	f, _ := fieldCache.LoadOrStore(t, sf)
	return f.(*structFields)
}

// unknownField says a key is not a field here, naming a close one when
// there is one and every field known at this level.
func unknownField(key string, known []string) string {
	msg := fmt.Sprintf("unknown field %q", key)
	if s := closest(key, known); s != "" {
		msg += fmt.Sprintf(", did you mean %q?", s)
	}
	return msg + " (known here: " + strings.Join(known, ", ") + ")"
}

// closest is the known name nearest to key when it is near enough to be a
// likely typo: compared case-insensitively with '-' as '_', within an
// edit distance (transpositions count once) that grows with the length.
func closest(key string, known []string) string {
	norm := func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "-", "_") }
	k := norm(key)
	limit := 1
	switch n := len(k); {
	case n > 8:
		limit = 3
	case n > 4:
		limit = 2
	}
	best, bestD := "", limit+1
	for _, c := range known {
		// Underscores left out ("idletimeout") are one slip, not several.
		d := min(editDistance(k, norm(c)), editDistance(strings.ReplaceAll(k, "_", ""), strings.ReplaceAll(norm(c), "_", "")))
		if d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance of a and b:
// insertions, deletions, substitutions and adjacent transpositions.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// yamlErrorRE splits yaml's parse errors ("yaml: line 3: did not find
// expected key") into the line and the message.
var yamlErrorRE = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// syntaxProblem turns a YAML parse error into a problem on its line.
func syntaxProblem(err error) ConfigProblem {
	p := ConfigProblem{Message: "not valid YAML: " + err.Error()}
	if m := yamlErrorRE.FindStringSubmatch(err.Error()); m != nil {
		p.Line, _ = strconv.Atoi(m[1])
		p.Message = "not valid YAML: " + m[2]
	}
	return p
}

// withLines gives each problem of a resolve error the line of its field
// and returns the ones not already explained by a decoding problem: a
// field whose value had the wrong shape is not also reported as missing.
func (d *configDecoder) withLines(err error) []ConfigProblem {
	var ce *ConfigError
	if !errors.As(err, &ce) {
		return []ConfigProblem{{Message: err.Error()}}
	}
	var out []ConfigProblem
	for _, p := range ce.Problems {
		if d.explained(p.Path) {
			continue
		}
		if p.Line == 0 {
			p.Line = d.lineOf(p.Path)
		}
		out = append(out, p)
	}
	return out
}

// explained reports whether a wrongly shaped value was already reported at
// path or around it.
func (d *configDecoder) explained(path string) bool {
	for _, p := range d.problems {
		if p.typed && (p.Path == "" || p.Path == path || strings.HasPrefix(path, p.Path+".") || strings.HasPrefix(path, p.Path+"[")) {
			return true
		}
	}
	return false
}

// sortProblems orders problems by line; those without a line go last.
func sortProblems(ps []ConfigProblem) {
	sort.SliceStable(ps, func(i, j int) bool {
		li, lj := ps[i].Line, ps[j].Line
		if li == 0 || lj == 0 {
			return li != 0 && lj == 0
		}
		return li < lj
	})
}
