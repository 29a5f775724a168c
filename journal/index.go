package journal

// indexFrom is the length from which a journal slice is looked up through
// a map rather than scanned. Most invocations hold a handful of entries,
// where a scan is cheapest and a map would cost allocations; a journal of
// thousands of steps must not cost a scan per entry, which made replaying
// n steps take time in n² (80,000 steps: ten seconds, past the start
// timeout, on every retry).
const indexFrom = 16

// keyed is an entry of a journal slice looked up by id: a notification
// (completion id or signal index), an expectation or a proposal.
type keyed interface {
	notification | expectation | proposal
}

func keyOf[T keyed](e *T) uint32 {
	switch x := any(e).(type) {
	case *notification:
		return x.id
	case *expectation:
		return x.id
	case *proposal:
		return x.id
	}
	panic("unreachable")
}

// index maps an id to the position of its first entry in one slice, once
// the slice has indexFrom entries; nil before.
type index map[uint32]int

// find is the position of the first entry of s with id, -1 if none.
func find[T keyed](s []T, x index, id uint32) int {
	if x != nil {
		if i, ok := x[id]; ok {
			return i
		}
		return -1
	}
	for i := range s {
		if keyOf(&s[i]) == id {
			return i
		}
	}
	return -1
}

// appendIndexed appends e to s and keeps x (built once s is long enough)
// up to date; the first entry of an id stays the one found.
func appendIndexed[T keyed](s []T, x *index, e T) []T {
	s = append(s, e)
	switch {
	case *x != nil:
		if _, ok := (*x)[keyOf(&e)]; !ok {
			(*x)[keyOf(&e)] = len(s) - 1
		}
	case len(s) >= indexFrom:
		*x = make(index, 2*len(s))
		for i := range s {
			if _, ok := (*x)[keyOf(&s[i])]; !ok {
				(*x)[keyOf(&s[i])] = i
			}
		}
	}
	return s
}
