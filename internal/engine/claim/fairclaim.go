package claim

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// FairClaimSQL is the fair claim (ClaimFair): $1 = the most rows, $2 =
// the lease, $3 = the arrival edge, $4, $5, $6, $9, $10, $11 = the served
// keys' priorities, keys, edges, edge ids, the claims that last took a row
// of each and the most rows of each this claim may take, $7, $8 = every
// known key's priorities and keys.
//
// The rows come back in the claim's own order, most urgent first and
// customers in turn, so that a caller working them in that order sends a
// customer's first row before another's tenth.
func (t Table) FairClaimSQL() string {
	return "WITH " + t.rankedClaim(t.FairIDsSQL("$1::int")) + "\n" + t.rankedRows()
}

// rankedClaim is the CTEs picked (the ids the query ids chooses, in its
// order) and claimed (their claim, each row with its place in that order,
// claim_rank). The rows are found as id = ANY (…), never a join the
// planner could turn into a scan of the whole table (ClaimIDsSQL).
func (t Table) rankedClaim(ids string) string {
	return fmt.Sprintf(`picked AS MATERIALIZED (SELECT ARRAY(%[3]s) AS ids
), claimed AS (
	UPDATE %[1]s SET %[2]s
	FROM picked WHERE %[1]s.id = ANY (picked.ids)
	RETURNING %[1]s.*, array_position(picked.ids, %[1]s.id) AS claim_rank
)`, t.Name, t.set(), ids)
}

// rankedRows reads what rankedClaim claimed, as Returning says, in the
// claim's order.
func (t Table) rankedRows() string {
	return fmt.Sprintf(`SELECT %s FROM claimed ORDER BY claim_rank`, t.Returning)
}

// LimitedFairClaimSQL is FairClaimSQL through bucket $14 at rate $12 up
// to burst $13 (Bucket): it claims at most as many rows as the bucket
// holds whole tokens, and takes one per row.
func (t Table) LimitedFairClaimSQL() string {
	return t.limited(t.FairIDsSQL(bucketLimit), fairParams+1)
}

// fairParams is how many parameters a fair claim's choice of rows takes
// (FairClaimSQL's); a statement of the caller's (FairOptions.SQL) has its
// own from the next.
const fairParams = 11

// FairIDsSQL chooses a fair claim's rows, at most limit (an SQL
// expression), with FairClaimSQL's parameters: a statement that claims
// rows and does more with them in the same transaction (the webhook
// fan-out) takes its rows here. Every row it reads it locks as it reads it, SKIP LOCKED,
// so concurrent claimers read disjoint rows: from each served key up to
// an even part of limit, and no more than the key's own most ($11), from
// its edge; from the arrival edge up to limit rows of keys not known. Ranked by priority, turn (the row's place among
// its key's rows), the claim that last took a row of its key (0 for a key
// not known) and due time, the first limit are claimed; the others are
// unlocked when the claim commits.
func (t Table) FairIDsSQL(limit string) string {
	due, order := t.keyDue("e")
	arrivalDue, arrivalOrder := t.Due("e", "$3")
	p, key := t.shareColumns("e")
	return fmt.Sprintf(`
	WITH known AS (
		SELECT h.id, k.p, h.due, row_number() OVER (PARTITION BY k.i ORDER BY h.due, h.id) AS turn, k.last
		FROM unnest($4::smallint[], $5::text[], $6::timestamptz[], $9::uuid[], $10::bigint[], $11::int[]) WITH ORDINALITY AS k(p, c, edge, edge_id, last, most, i)
		CROSS JOIN LATERAL (
			SELECT e.id, e.%[9]s AS due FROM %[1]s e
			WHERE e.status = 'pending' AND %[2]s%[7]s
			ORDER BY %[3]s
			LIMIT least(ceil((%[4]s)::float8 / greatest(cardinality($5::text[]), 1))::int, k.most)
			FOR UPDATE SKIP LOCKED) h
	), fresh AS (
		SELECT a.id, a.p, a.due, row_number() OVER (PARTITION BY a.p, a.c ORDER BY a.due) AS turn, 0::bigint AS last
		FROM (
			SELECT e.id, %[5]s AS p, %[6]s AS c, e.%[9]s AS due FROM %[1]s e
			WHERE e.status = 'pending' AND %[8]s%[7]s
			AND NOT EXISTS (SELECT FROM unnest($7::smallint[], $8::text[]) AS k(p, c) WHERE k.p = %[5]s AND k.c = %[6]s)
			ORDER BY %[10]s
			LIMIT %[4]s
			FOR UPDATE SKIP LOCKED) a
	)
	SELECT id FROM (SELECT id, p, turn, last, due FROM known UNION ALL SELECT id, p, turn, last, due FROM fresh) c
	ORDER BY p, turn, last, due
	LIMIT %[4]s`, t.Name, due, order, limit, p, key, t.claimableAs("e"), arrivalDue, t.DueColumn, arrivalOrder)
}

// keyDue is the due predicate of a key's rows from its edge, k.edge and
// k.edge_id, and their order: due time, then id (after the key's own
// columns, the same for all of them), so that the edge stops
// inside a run of rows written at one time (a bulk insert's share its
// transaction's now()) rather than at its start, where every row of the
// run already claimed would be read again by every claim.
//
// The key's rows are bounded by two comparisons of the share index's
// whole key, from the edge to (the key, now()), and by nothing else: an
// equality on the key besides would be where the index scan starts — at
// the key's first entry, through the entries of every row claimed since
// the index was last cleaned (thousands a claim, under a held snapshot,
// or in a backlog's first minutes) — instead of at the edge. The claim
// index, by due time alone, then has only "due by now" to go on, every
// key's rows, and the planner reads the share index from the edge and
// stops at the LIMIT. "Due by now" stays, spelled on its own: it implies
// both indexes' predicate (Table).
func (t Table) keyDue(alias string) (due, order string) {
	col := alias + "." + t.DueColumn
	p, key := t.shareColumns(alias)
	// A table without a priority has none in its index either: the rows
	// compared start at the key.
	row, edge, upto, end := fmt.Sprintf("%s, %s, %s.id", key, col, alias), "k.c, k.edge, k.edge_id", key+", "+col, "k.c, now()"
	if t.Fair.Priority != "" {
		row, edge, upto, end = p+", "+row, "k.p, "+edge, p+", "+upto, "k.p, "+end
	}
	// The order is the index's whole key too: the same within one key,
	// and with no equality to make the key's columns constant, the one
	// order the planner sees the index give without a sort.
	return fmt.Sprintf("(%s) >= (%s) AND (%s) <= (%s) AND %s <= now()", row, edge, upto, end, col), row
}

// FairPlanSQL is IndexOnlySQL for a fair claim's transaction, which it
// also makes read each key's rows from the share index, whatever the
// statistics say. The claim index, by due time alone, can serve a key's
// rows too, sorted after; with statistics taken while nothing was pending
// (an ANALYZE between two backlogs) the planner believed it all but empty
// and read a 20,000-row backlog through it on every claim. Sorting is the
// difference between the two — the share index yields a key's rows in
// order — so sorts are made to cost what a disabled plan costs: every
// plan of the claim still sorts its ranking, but no plan of a key's rows
// sorts.
//
// It also has the fair claim's statements planned once for all, a generic
// plan, as the other claims' are (IndexOnlySQL). Left to choose, Postgres
// compares a generic plan's cost with the custom plans' it made first;
// every plan of a fair claim costs a disabled sort, the comparison never
// favours the generic one, and each claim was planned anew: 1.3 ms of
// the database's CPU a claim, more than it took to run. The plan does not
// depend on the values: the indexes are the only way to the rows.
//
// It is local (set_config's third argument), as IndexOnlySQL is.
const FairPlanSQL = IndexOnlySQL + `, set_config('enable_sort', 'off', true), set_config('enable_incremental_sort', 'off', true),
	set_config('plan_cache_mode', 'force_generic_plan', true)`

// shareColumns are t's Share columns qualified by alias; a table without a
// priority has them all at 0.
func (t Table) shareColumns(alias string) (priority, key string) {
	priority = "0::smallint"
	if t.Fair.Priority != "" {
		priority = alias + "." + t.Fair.Priority
	}
	return priority, t.ShareKeyOn(alias)
}

// ShareKeyOn is t's share key (Share.Key) on t under alias: what a
// statement of the caller's that reads t's rows under another name
// returns as their key.
func (t Table) ShareKeyOn(alias string) string {
	return t.onAlias(t.Fair.Key, alias)
}

// onAlias is the SQL expression expr, on t by its name, on t under alias.
func (t Table) onAlias(expr, alias string) string {
	return strings.ReplaceAll(expr, t.Name+".", alias+".")
}

// claimableAs is Claimable as an extra condition on t under alias.
func (t Table) claimableAs(alias string) string {
	if t.Claimable == "" {
		return ""
	}
	return " AND " + t.onAlias(t.Claimable, alias)
}

// FairSettleSQL reads, after a fair claim in its transaction, where its
// edges move (Fair.settle), in one row: the database's now(); the due
// time of the first row due from the arrival edge $1 whose key is neither
// known ($3, $4: every known key's priorities and keys) nor among the
// arrived keys (NULL: none) — the arrival edge moves there, the rows of
// known keys it passes being in front of their keys' edges; the arrived
// keys, those of the first $2 rows still due from the arrival edge, with
// the due time of the first of each (arrays of priorities, keys and due
// times), which become known; and, for each served key ($5, $6, $7, $8:
// their priorities, keys, edges and edge ids, in their order), the due
// time and id of its first row still due from its edge, claimable and
// pending, whoever holds it locked (NULLs: none).
func (t Table) FairSettleSQL() string {
	keyDue, keyOrder := t.keyDue("e")
	due, order := t.Due("e", "$1")
	p, key := t.shareColumns("e")
	return fmt.Sprintf(`WITH arrived AS MATERIALIZED (
	SELECT p, c, min(due) AS due, count(*) AS rows FROM (
		SELECT %[4]s AS p, %[5]s AS c, %[3]s AS due FROM %[1]s e
		WHERE e.status = 'pending' AND %[2]s%[6]s
		ORDER BY %[3]s LIMIT $2) a
	GROUP BY p, c
), next AS (
	SELECT array_agg(n.due ORDER BY k.i) AS due, array_agg(n.id::text ORDER BY k.i) AS id
	FROM unnest($5::smallint[], $6::text[], $7::timestamptz[], $8::uuid[]) WITH ORDINALITY AS k(p, c, edge, edge_id, i)
	LEFT JOIN LATERAL (SELECT e.%[9]s AS due, e.id FROM %[1]s e
		WHERE e.status = 'pending' AND %[7]s%[6]s
		ORDER BY %[8]s LIMIT 1) n ON true
)
SELECT now(), (SELECT %[3]s FROM %[1]s e
	WHERE e.status = 'pending' AND %[2]s%[6]s
	AND NOT EXISTS (SELECT FROM arrived k WHERE k.p = %[4]s AND k.c = %[5]s)
	AND NOT EXISTS (SELECT FROM unnest($3::smallint[], $4::text[]) AS k(p, c) WHERE k.p = %[4]s AND k.c = %[5]s)
	ORDER BY %[3]s LIMIT 1),
	(SELECT array_agg(p) FROM arrived), (SELECT array_agg(c) FROM arrived), (SELECT array_agg(due) FROM arrived),
	(SELECT coalesce(sum(rows), 0)::int FROM arrived),
	next.due, next.id
FROM next`, t.Name, due, order, p, key, t.claimableAs("e"), keyDue, keyOrder, t.DueColumn)
}

// settled is FairSettleSQL's row.
type settled struct {
	now, arrivalNext *time.Time
	arrivedP         []int16
	arrivedC         []string
	arrivedDue       []time.Time
	window           int // rows still due read from the arrival edge, at most $2
	nextDue          []*time.Time
	nextID           []*string
}

// FairOptions are what a fair claim does beyond taking rows.
type FairOptions struct {
	// Bucket, if set, is a pool-wide rate limit the claim goes through:
	// concurrent claimers anywhere in the pool never claim more than it
	// allows, since each locks it first (LimitedFairClaimSQL).
	Bucket *Bucket

	// SQL, if set, is a statement of the caller's in place of
	// FairClaimSQL: one that takes its rows with FairIDsSQL("$1::int")
	// and does more with them in the same transaction (the webhook
	// fan-out makes their events and deliveries), with FairClaimSQL's
	// parameters; Args are its own, from $12 on. Not with Bucket.
	SQL  string
	Args []any

	// FirstComeSQL goes with SQL: the same statement taking its rows
	// with ClaimIDsSQL("$1::int", "$3") in place of FairIDsSQL, for the
	// claims made while the lane knows no key (claimFirstCome), with
	// their parameters — $1 the most rows, $2 the lease, $3 the arrival
	// edge — and Args from $4 on. Without it, every claim with SQL is a
	// fair one.
	FirstComeSQL string

	// Most caps the rows of a key (ShareKey.Key, at any priority) this
	// claim takes; a key not in it takes up to an even share of n. A
	// webhook endpoint that holds its share of the process's slots is
	// capped so, and its backlog leaves the rest to the others
	// (engine.Slots).
	Most map[string]int
}

// ClaimFair claims up to n rows of t as a fair claim from f's edges:
// priorities first, then round-robin over the keys of t.Fair (see Fair),
// as opts says. The claim and the reads after it that move f's edges run
// in one implicit transaction (a first-come claim, made while f knows no
// key, may read in a second: claimFirstCome). more reports that due rows
// were left: keys the claim knows but could not finish.
//
// keyOf is the key of a claimed row, as the claim reads it: the claim
// that last took a key's row decides its place in the next ones.
func ClaimFair[T any](ctx context.Context, db DB, t Table, f *Fair, n int, lease time.Duration, opts FairOptions, scan pgx.RowToFunc[T], keyOf func(T) ShareKey) (claimed []T, h Held, more bool, err error) {
	f.claiming.Lock()
	defer f.claiming.Unlock()
	// Detached and bounded like every claim (claimRows says why).
	ctx, cancel := MarkContext(ctx)
	defer cancel()
	fail := func(err error) ([]T, Held, bool, error) {
		return nil, Held{}, false, fmt.Errorf("claim %s: %w", t.Name, err)
	}
	f.arrival.Margin = f.Margin
	if opts.Bucket == nil && f.Known() == 0 {
		// The caller's statement returns its rows in its own order (the
		// fan-out: deliveries, their events in the order enqueued); the
		// claim's own are ranked as the fair claim ranks them.
		sql, args, rank := opts.FirstComeSQL, opts.Args, false
		if opts.SQL == "" {
			sql, args, rank = t.memoized("claim", t.ClaimSQL), nil, true
		}
		if sql != "" {
			claimed, more, err = claimFirstCome(ctx, db, t, f, sql, args, rank, n, lease, scan, keyOf)
			if err != nil {
				return nil, Held{}, false, err // claimRows names the table
			}
			return claimed, Held{}, more, nil
		}
	}
	served, edges, edgeIDs, last, known, turn, rewinds := f.serve()
	edge, token := f.arrival.Start()
	sp, sk := splitKeys(served)
	kp, kk := splitKeys(known)
	most := make([]int, len(served))
	for i, k := range served {
		most[i] = n
		if m, ok := opts.Most[k.Key]; ok {
			most[i] = max(min(m, n), 0)
		}
	}
	bucket := opts.Bucket
	b := &pgx.Batch{}
	b.Queue(FairPlanSQL)
	args := []any{n, lease, edge, sp, sk, edges, kp, kk, edgeIDs, last, most}
	switch {
	case bucket != nil:
		b.Queue(bucketLockSQL, bucket.Name)
		b.Queue(t.memoized("limited fair claim", t.LimitedFairClaimSQL), append(args, bucket.Rate, bucket.Burst, bucket.Name)...)
	case opts.SQL != "":
		b.Queue(opts.SQL, append(args, opts.Args...)...)
	default:
		b.Queue(t.memoized("fair claim", t.FairClaimSQL), args...)
	}
	b.Queue(t.memoized("fair settle", t.FairSettleSQL), edge, n, kp, kk, sp, sk, edges, edgeIDs)
	if bucket != nil {
		b.Queue(bucketLeftSQL, bucket.Name, bucket.Rate, bucket.Burst)
	}
	br := db.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return fail(err)
	}
	if bucket != nil {
		if _, err := br.Exec(); err != nil {
			return fail(err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return fail(err)
	}
	if claimed, err = pgx.CollectRows(rows, scan); err != nil {
		return fail(err)
	}
	st, err := scanSettled(br.QueryRow())
	if err != nil {
		return fail(err)
	}
	if bucket != nil {
		var tokens float64
		if err := br.QueryRow().Scan(&tokens); err != nil {
			return fail(err)
		}
		h = held(tokens, n, len(claimed))
	}
	if err := br.Close(); err != nil {
		return fail(err)
	}
	if more, err = f.settleFrom(st, edge, token, served, tookKeys(claimed, keyOf), n, turn, rewinds); err != nil {
		return fail(err)
	}
	return claimed, h, more, nil
}

// claimFirstCome is ClaimFair's claim while f knows no key, by sql
// (ClaimSQL, or FairOptions.FirstComeSQL with its args): every due row is
// then in front of the arrival edge, and the fair claim, with no key's
// edge to read, takes the first n rows due from it — the rows a claim of
// the first due rows takes (ClaimIDsSQL). That claim is the cheaper: a smaller
// plan, and after it only the read of where the window's next due row is
// (NextSQL). This is the claim of a steady load, each of whose rows is
// claimed as it comes; a fair claim of its one row cost the database about
// half as much again. Only where rows are left due (a backlog begins, a
// row came in the meantime) does it read, in a second transaction, what the
// fair claim's settling read would have read after it, and settles f
// alike; the next claim is then fair. ClaimSQL's rows are put in the fair
// claim's order in Go (rank, inTurn).
func claimFirstCome[T any](ctx context.Context, db DB, t Table, f *Fair, sql string, args []any, rank bool, n int, lease time.Duration, scan pgx.RowToFunc[T], keyOf func(T) ShareKey) (claimed []T, more bool, err error) {
	_, _, _, _, _, turn, rewinds := f.serve()
	edge, token := f.arrival.Start()
	// claimRows moves the arrival edge to the first row still due, which
	// keeps every due row in front of it whatever follows.
	claimed, left, err := claimRows(ctx, db, t, &f.arrival, sql, n, lease, scan, args...)
	if err != nil {
		return nil, false, err
	}
	if rank {
		inTurn(claimed, keyOf)
	}
	if !left {
		// No row is due from the arrival edge: the settling read would
		// have found no keys, and the claim's own are taken whole.
		return claimed, false, nil
	}
	// The claim has committed: its rows are the caller's whatever this
	// read does. If it fails, f is left as it was — no key known, the
	// arrival edge where the claim began — and the next claim, first-come
	// again, takes the rows left and reads after them.
	st, err := readSettled(ctx, db, t, edge, n)
	if err != nil {
		return claimed, true, nil
	}
	if more, err = f.settleFrom(st, edge, token, nil, tookKeys(claimed, keyOf), n, turn, rewinds); err != nil {
		return claimed, true, nil
	}
	return claimed, more, nil
}

// readSettled runs FairSettleSQL for a claim from edge that knew no key
// and could take n rows, in a transaction of its own.
func readSettled(ctx context.Context, db DB, t Table, edge time.Time, n int) (settled, error) {
	b := &pgx.Batch{}
	b.Queue(FairPlanSQL)
	b.Queue(t.memoized("fair settle", t.FairSettleSQL), edge, n, []int16{}, []string{}, []int16{}, []string{}, []time.Time{}, []string{})
	br := db.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return settled{}, err
	}
	st, err := scanSettled(br.QueryRow())
	if err != nil {
		return settled{}, err
	}
	return st, br.Close()
}

// inTurn sorts rows, claimed as the first due rows, into a fair claim's
// order: by priority, then turn (a row's place among its key's rows), the
// order they came in within each.
func inTurn[T any](rows []T, keyOf func(T) ShareKey) {
	if len(rows) < 2 {
		return
	}
	type ranked struct {
		row      T
		priority int16
		turn, at int
	}
	turns := make(map[ShareKey]int, len(rows))
	rs := make([]ranked, len(rows))
	for i, r := range rows {
		k := keyOf(r)
		turns[k]++
		rs[i] = ranked{row: r, priority: k.Priority, turn: turns[k], at: i}
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		return cmp.Or(cmp.Compare(a.priority, b.priority), cmp.Compare(a.turn, b.turn), cmp.Compare(a.at, b.at))
	})
	for i, r := range rs {
		rows[i] = r.row
	}
}

// tookKeys is the keys of claimed rows.
func tookKeys[T any](claimed []T, keyOf func(T) ShareKey) map[ShareKey]bool {
	took := make(map[ShareKey]bool, len(claimed))
	for _, r := range claimed {
		took[keyOf(r)] = true
	}
	return took
}

// scanSettled reads FairSettleSQL's row.
func scanSettled(row pgx.Row) (st settled, err error) {
	err = row.Scan(&st.now, &st.arrivalNext, &st.arrivedP, &st.arrivedC, &st.arrivedDue, &st.window, &st.nextDue, &st.nextID)
	return st, err
}

// settleFrom settles f (Fair.settle) with what FairSettleSQL read, st,
// after a claim from the arrival edge edge (Window.Start's token) that
// served the keys served, took rows of the keys took and could take n,
// and moves the arrival edge. It reports whether rows are known to be left.
func (f *Fair) settleFrom(st settled, edge time.Time, token uint64, served []ShareKey, took map[ShareKey]bool, n int, turn, rewinds uint64) (more bool, err error) {
	if len(st.nextDue) != len(served) || len(st.nextID) != len(served) || len(st.arrivedC) != len(st.arrivedP) || len(st.arrivedDue) != len(st.arrivedP) {
		return false, fmt.Errorf("settling read %d next rows of %d served keys, %d arrived keys with %d and %d columns",
			len(st.nextDue), len(served), len(st.arrivedP), len(st.arrivedC), len(st.arrivedDue))
	}
	next := make([]rowEdge, len(served))
	for i := range next {
		next[i] = rowEdge{Due: st.nextDue[i], ID: st.nextID[i]}
	}
	arrived := make(map[ShareKey]time.Time, len(st.arrivedP))
	for i, p := range st.arrivedP {
		arrived[ShareKey{Priority: p, Key: st.arrivedC[i]}] = st.arrivedDue[i]
	}
	now := *st.now
	more = f.settle(edge, took, served, next, arrived, st.window >= n, turn, rewinds, now)
	var at time.Time
	if st.arrivalNext != nil {
		at = *st.arrivalNext
	}
	f.arrival.Advance(token, now, at)
	return more, nil
}

// splitKeys is keys as the arrays of its priorities and keys.
func splitKeys(keys []ShareKey) (priorities []int16, names []string) {
	priorities, names = make([]int16, 0, len(keys)), make([]string, 0, len(keys))
	for _, k := range keys {
		priorities = append(priorities, k.Priority)
		names = append(names, k.Key)
	}
	return priorities, names
}
