package claim

import "sync"

// A claim's statements are built from its Table's names whenever they are
// asked for, and a claim asks for two or three of a few kilobytes each:
// tens of microseconds of the worker's CPU a claim, which at low rates is
// a claim a message. memoized builds each once per table and statement.
var memo sync.Map // memoKey → string

// memoKey is a Table with its Share by value, and which statement.
type memoKey struct {
	table     Table // Fair nil: share holds it
	share     Share
	fair      bool
	statement string
}

// A Table that gains a field a map key cannot hold fails here, at build
// time, not in memo.Load.
var _ = map[memoKey]bool{}

// memoized is build's statement for t, built the first time it is asked
// for statement.
func (t Table) memoized(statement string, build func() string) string {
	k := memoKey{table: t, statement: statement}
	if t.Fair != nil {
		k.table.Fair, k.share, k.fair = nil, *t.Fair, true
	}
	if s, ok := memo.Load(k); ok {
		return s.(string)
	}
	s := build()
	memo.Store(k, s)
	return s
}
