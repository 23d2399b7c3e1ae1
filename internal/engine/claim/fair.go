package claim

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Share names the columns by which a table's rows are claimed fairly
// (ClaimFair): whose rows they are (Key, text) and how urgent (Priority,
// e.g. "priority", smallint; lower first; "" for a table whose rows are
// all alike). Key is an SQL expression on the table by its name, as
// Claimable is: a column ("email_outbox.customer_id") or, where rows of
// no owner fall back on another column, an expression of several. Its
// index is (Priority, Key, due column, id) with the claim index's
// predicate, Key spelled as the claim spells it.
type Share struct {
	Priority string
	Key      string
}

// ShareKey is one key of a fair claim: the rows of one Key at one
// Priority.
type ShareKey struct {
	Priority int16
	Key      string
}

// MaxServedKeys bounds the keys one fair claim reads from their own edges:
// each costs an index descent. Beyond it, keys take turns, least recently
// served first.
const MaxServedKeys = 64

// Fair is where one lane's fair claims start: its arrival edge, a Window
// over the claim index by due time, and the keys it knows, each with an
// edge of its own in the share index.
//
// A key is known while the lane has seen due rows of it that it did not
// claim. A claim takes rows from the edges of known keys and, from the
// arrival edge, rows of keys not known; it ranks them by priority, then by
// turn — a row's place among its key's rows — then by when its key last
// had a row claimed (never first), then due time, and takes the first n.
// The third is the round-robin across claims: a claim of one row (a rate
// limit's one token) takes the row of the key whose turn is next, not the
// oldest row. After it, in the same transaction, each served key's edge moves
// to its first row still due (the key is forgotten when there is none),
// the keys of the first rows still due from the arrival edge become known,
// and the arrival edge moves to the first due row of a key still not
// known. So the arrival edge never passes a row of a key not known, and a
// key's edge never passes a row of its own: every due row is in front of
// one of the lane's edges, and a backlog is walked by the arrival edge
// once, when its key becomes known, not by every claim.
//
// Low, for the sweep, is the lowest of the edges. A Fair is safe for
// concurrent use; its claims take turns.
type Fair struct {
	Margin time.Duration // zero means DefaultMargin

	claiming sync.Mutex // one claim at a time: each reads and settles the keys

	mu      sync.Mutex
	arrival Window
	keys    map[ShareKey]*keyEdge
	turns   uint64 // claims so far: a key's served is the claim that last took a row of it
	rewinds uint64
}

// keyEdge is a key's edge, a due time and an id (its rows are read in
// that order), and the claim that last took a row of it (0: none).
type keyEdge struct {
	edge   time.Time
	id     string // "" for the first id of the due time
	served uint64
}

// rowEdge is where a key's rows resume: a row's due time and id, NULLs
// for none.
type rowEdge struct {
	Due *time.Time
	ID  *string
}

// firstID is the lowest uuid, the id of an edge at a due time's start.
const firstID = "00000000-0000-0000-0000-000000000000"

// at moves e to due and id if that is behind it.
func (e *keyEdge) at(due time.Time, id string) {
	if due.Before(e.edge) || due.Equal(e.edge) && id < e.id {
		e.edge, e.id = due, id
	}
}

// Arrival is f's arrival edge, for a claim that is not fair (a fallback
// that takes rows one by one): it moves it no further than its first due
// row of any key, which leaves every row in front of one of f's edges.
func (f *Fair) Arrival() *Window { return &f.arrival }

// Known is how many keys f knows: keys with due rows its claims left.
func (f *Fair) Known() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.keys)
}

// Low is where a sweep stops: no edge of f is behind it (the zero time
// before the first claim).
func (f *Fair) Low() time.Time {
	low := f.arrival.Low()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range f.keys {
		if k.edge.Before(low) {
			low = k.edge
		}
	}
	return low
}

// Rewind moves every edge of f back to to, if it is in front of it, after
// a sweep committed rows due at to (Window.Rewind). A claim under way
// when it is called moves no edge forward and forgets no key.
func (f *Fair) Rewind(to time.Time) {
	f.arrival.Rewind(to)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rewinds++
	for _, k := range f.keys {
		k.at(to, "")
	}
}

// serve picks the keys a claim reads from their edges: the most urgent
// first, least recently served first within a priority, at most
// MaxServedKeys. It returns them with their edges, every known key (the
// claim's arrivals exclude their rows), and the turn and rewind count the
// claim settles with.
func (f *Fair) serve() (served []ShareKey, edges []time.Time, ids []string, last []int64, known []ShareKey, turn, rewinds uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.turns++
	for k := range f.keys {
		known = append(known, k)
	}
	slices.SortFunc(known, func(a, b ShareKey) int {
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(f.keys[a].served, f.keys[b].served), cmp.Compare(a.Key, b.Key))
	})
	served = known[:min(len(known), MaxServedKeys)]
	for _, k := range served {
		e := f.keys[k]
		edges = append(edges, e.edge)
		ids = append(ids, cmp.Or(e.id, firstID))
		last = append(last, int64(e.served))
	}
	return served, edges, ids, last, known, f.turns, f.rewinds
}

// settle records what a claim that started at the arrival edge from
// found after it: the keys it took rows of; for each served key the due
// time of its first row still due (nil: none); the keys of the rows still
// due from the arrival edge with the due time of their first, and whether
// those rows filled the read (full: more may be behind them). It reports
// whether rows are known to be left.
func (f *Fair) settle(from time.Time, took map[ShareKey]bool, served []ShareKey, next []rowEdge, arrived map[ShareKey]time.Time, full bool, turn, rewinds uint64, now time.Time) (more bool) {
	margin := f.Margin
	if margin <= 0 {
		margin = DefaultMargin
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.keys == nil {
		f.keys = map[ShareKey]*keyEdge{}
	}
	rewound := rewinds != f.rewinds
	for i, k := range served {
		e := f.keys[k]
		if took[k] {
			e.served = turn
		}
		switch {
		case rewound:
			// A sweep moved rows since the claim began: what it read
			// may be behind them.
		case next[i].Due == nil:
			delete(f.keys, k)
		case next[i].Due.Before(now.Add(-margin)):
			e.edge, e.id = *next[i].Due, *next[i].ID
		default:
			e.edge, e.id = now.Add(-margin), ""
		}
		more = more || next[i].Due != nil
	}
	for k, due := range arrived {
		if e, ok := f.keys[k]; ok {
			e.at(due, "")
		} else if took[k] {
			f.keys[k] = &keyEdge{edge: due, served: turn}
		} else {
			f.keys[k] = &keyEdge{edge: due}
		}
	}
	// A key the claim took rows of from the arrival edge is known from
	// now, with its turn taken: the next claim serves the others first,
	// and forgets it if it has nothing left. Without this, a key met only
	// through the arrival edge would rank as never served on every claim
	// of one row, and take every one. Among the rows read after the
	// claim, its edge is its first (above). Where those filled the read
	// (full), more may be behind them, and its edge is the claim's start,
	// which no row of a key not known is behind.
	//
	// Where they did not fill it, they were every due row from the
	// claim's start on, and a key taken and not among them has none left.
	// It stays unknown: knowing it would cost the next claims a read of
	// its edge and of its next row, to find nothing — two index descents
	// for every message of a steady load, whose rows are each a different
	// customer's and are claimed as they come.
	if full && !rewound {
		for k := range took {
			if _, ok := f.keys[k]; !ok {
				f.keys[k] = &keyEdge{edge: from, served: turn}
			}
		}
	}
	return more || len(arrived) > 0
}
