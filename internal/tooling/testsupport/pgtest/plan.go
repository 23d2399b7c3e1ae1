package pgtest

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Querier is what the plan helpers need: a pool or a connection.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Plan returns the planner's plan of sql with args, as EXPLAIN prints
// it, without running the statement.
func Plan(t testing.TB, db Querier, sql string, args ...any) string {
	t.Helper()
	rows, err := db.Query(context.Background(), "EXPLAIN "+sql, args...)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", firstLine(sql), err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", firstLine(sql), err)
	}
	return strings.Join(lines, "\n")
}

// BeginWith begins a transaction on db, runs statements in it, and
// returns it, rolled back when the test ends: the local set_config
// statements a claim runs first (claim.IndexOnlySQL), so that what a test
// plans in it is planned as the claim's is; a report's first read, whose
// snapshot it then holds.
func BeginWith(t testing.TB, db Querier, statements ...string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	for _, sql := range statements {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", firstLine(sql), err)
		}
	}
	return tx
}

// IndexEntriesRead runs fn in a transaction it rolls back and returns how
// many entries of index fn's statements read, dead ones included
// (pg_stat_get_xact_tuples_returned): the work an index scan does,
// counted, where a duration would depend on how busy the machine is. An
// entry a scan passes because its own conditions reject it is not
// counted: IndexReads counts the pages too.
func IndexEntriesRead(t testing.TB, db Querier, index string, fn func(ctx context.Context, tx pgx.Tx) error) int64 {
	t.Helper()
	return countIn(t, db, `SELECT pg_stat_get_xact_tuples_returned($1::regclass)`, index, fn)
}

// IndexReads is what fn, run once in a transaction rolled back, read of
// each of indexes: its entries (as IndexEntriesRead) and its pages, those
// in shared buffers and those read in (pg_stat_get_xact_blocks_fetched) —
// a scan that starts before where its conditions let rows through reads
// every page in between, whose entries it rejects, uncounted as entries.
// One run for every count: a claim run again sees what its first run
// changed in the claimer's memory, which the rollback does not undo.
func IndexReads(t testing.TB, db Querier, fn func(ctx context.Context, tx pgx.Tx) error, indexes ...string) (entries, pages map[string]int64) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	read := func() (entries, pages map[string]int64) {
		entries, pages = map[string]int64{}, map[string]int64{}
		for _, index := range indexes {
			var e, p int64
			if err := tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_returned($1::regclass), pg_stat_get_xact_blocks_fetched($1::regclass)`, index).Scan(&e, &p); err != nil {
				t.Fatal(err)
			}
			entries[index], pages[index] = e, p
		}
		return entries, pages
	}
	entriesBefore, pagesBefore := read()
	if err := fn(ctx, tx); err != nil {
		t.Fatal(err)
	}
	entries, pages = read()
	for _, index := range indexes {
		entries[index] -= entriesBefore[index]
		pages[index] -= pagesBefore[index]
	}
	return entries, pages
}

// countIn runs fn in a transaction it rolls back, and returns what the
// statement read, of the relation rel, said before and after.
func countIn(t testing.TB, db Querier, read, rel string, fn func(ctx context.Context, tx pgx.Tx) error) int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var before, after int64
	if err := tx.QueryRow(ctx, read, rel).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if err := fn(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, read, rel).Scan(&after); err != nil {
		t.Fatal(err)
	}
	return after - before
}

func firstLine(sql string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(sql), "\n")
	return line
}

// Statement is one SQL statement that names rows of Table by id, with
// arguments to plan it with. Allow names other indexes of Table that it
// may read besides, for rows it does not name by id (the webhook fan-out
// looks for an earlier row of an event's ordering key).
type Statement struct {
	Name, Table, SQL string
	Args             []any
	Allow            []string
}

// RequireKeyLookups runs RequireKeyLookup for each statement, each in a
// parallel subtest of its name.
func RequireKeyLookups(t *testing.T, db Querier, stmts []Statement) {
	t.Helper()
	for _, s := range stmts {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			requireKeyLookup(t, db, s.Table, s.Allow, s.SQL, s.Args...)
		})
	}
}

// RequireKeyLookup fails t unless the plan of sql finds its rows of table
// through table's primary key: no other index of table, and no sequential
// scan of it, appears in the plan.
func RequireKeyLookup(t testing.TB, db Querier, table, sql string, args ...any) {
	t.Helper()
	requireKeyLookup(t, db, table, nil, sql, args...)
}

func requireKeyLookup(t testing.TB, db Querier, table string, allow []string, sql string, args ...any) {
	t.Helper()
	plan := Plan(t, db, sql, args...)
	rows, err := db.Query(context.Background(), `SELECT indexrelid::regclass::text, indisprimary FROM pg_index WHERE indrelid = $1::regclass`, table)
	if err != nil {
		t.Fatal(err)
	}
	var (
		name    string
		primary bool
		keyed   bool
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &primary}, func() error {
		switch {
		case primary:
			keyed = keyed || strings.Contains(plan, " "+name+" ")
		case slices.Contains(allow, name):
		case strings.Contains(plan, " "+name+" "):
			t.Errorf("%s reads %s, not the primary key:\n%s", firstLine(sql), name, plan)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !keyed || strings.Contains(plan, "Seq Scan on "+table+" ") {
		t.Errorf("%s does not find its rows of %s by primary key:\n%s", firstLine(sql), table, plan)
	}
}
