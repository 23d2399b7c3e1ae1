package claim

import "fmt"

// FiniteTime is col, a timestamptz, as a time.Time can hold it: 'infinity'
// reads as the last second of year 9999 and '-infinity' as the first of
// year 1. pgx cannot scan either into a time.Time, and one row holding
// one — plain SQL from before migration 00026 made the due times finite,
// or a database whose CHECK was dropped by hand — failed every read that
// listed it (worker show exited 1). col is a column name of this module,
// never input.
func FiniteTime(col string) string {
	return fmt.Sprintf(`CASE WHEN isfinite(%[1]s) OR %[1]s IS NULL THEN %[1]s
		WHEN %[1]s > now() THEN '9999-12-31 23:59:59+00'::timestamptz ELSE '0001-01-01 00:00:00+00'::timestamptz END`, col)
}
