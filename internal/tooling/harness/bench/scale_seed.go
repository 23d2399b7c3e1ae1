package bench

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/postbox/postbox/webhook"
)

// seedCustomers is how many customers the seeded history and the scale
// section's load spread over: every insert lands at a random place in
// email_outbox_customer_idx, as an application's do.
const seedCustomers = 100_000

// seedSpan is how far back the seeded history reaches.
const seedSpan = 90 * 24 * time.Hour

// seedHistory fills a migrated database with rows sent emails: dispatched
// rows spread over seedSpan, each with its attempt in email_attempts, as a
// few months of postbox would leave them. It drops the two tables' indexes
// and keys first and builds them again after (an INSERT per row into ten
// indexes is what made the seed take 22 minutes), then vacuums, freezes
// and analyzes, so the statistics say what a production table's say:
// millions sent, nothing pending. It returns how long it took.
func seedHistory(ctx context.Context, url string, rows int, body string, logf func(string, ...any)) (time.Duration, error) {
	start := time.Now()
	db, err := seedPool(ctx, url)
	if err != nil {
		return 0, err
	}
	defer db.Close()

	// The attempts are dated over seedSpan: their weeks must exist
	// (email_attempts is partitioned by week, migration 00018).
	if _, err := db.Exec(ctx, `SELECT postbox_history_partitions('email_attempts', now() - $1::interval, now())`, seedSpan); err != nil {
		return 0, fmt.Errorf("make the seeded weeks of email_attempts: %w", err)
	}
	restore, err := dropIndexes(ctx, db, "email_attempts", "email_requeues", "email_outbox")
	if err != nil {
		return 0, err
	}
	const chunk = 500_000
	var (
		next  = make(chan int)
		errMu sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for range 2 { // two cores: two inserting sessions
		wg.Go(func() {
			for lo := range next {
				hi := min(lo+chunk, rows) - 1
				if _, err := db.Exec(ctx, seedOutboxSQL, lo, hi, rows, seedSpan.Seconds(), seedCustomers, subject, body); err != nil {
					errMu.Lock()
					first = cmpErr(first, fmt.Errorf("seed email_outbox rows %d-%d: %w", lo, hi, err))
					errMu.Unlock()
				}
			}
		})
	}
	for lo := 0; lo < rows; lo += chunk {
		logf("pool scale: seeding sent rows %d of %d (%s)", lo, rows, time.Since(start).Round(time.Second))
		select {
		case next <- lo:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	if first != nil {
		return 0, first
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	logf("pool scale: seeding their attempts (%s)", time.Since(start).Round(time.Second))
	if _, err := db.Exec(ctx, `INSERT INTO email_attempts (row_id, attempt, outcome, at)
SELECT id, 1, 'sent', dispatched_at FROM email_outbox WHERE status = 'dispatched'`); err != nil {
		return 0, fmt.Errorf("seed email_attempts: %w", err)
	}
	logf("pool scale: building indexes (%s)", time.Since(start).Round(time.Second))
	if err := restore(ctx); err != nil {
		return 0, err
	}
	logf("pool scale: vacuum, freeze, analyze (%s)", time.Since(start).Round(time.Second))
	for _, t := range []string{"email_outbox", "email_attempts"} {
		if _, err := db.Exec(ctx, "VACUUM (FREEZE, ANALYZE) "+t); err != nil {
			return 0, fmt.Errorf("vacuum %s: %w", t, err)
		}
	}
	if _, err := db.Exec(ctx, "CHECKPOINT"); err != nil {
		logf("pool scale: CHECKPOINT refused (%v)", err)
	}
	return time.Since(start), nil
}

// seedOutboxSQL writes rows $1..$2 of $3: row i was created i/$3 of the
// way from $4 seconds ago to now, sent a second later, for one of $5
// customers; every second one belongs to an invoice. The payload is what a
// sent raw row keeps (the scrub removed only secret keys). Its id is the
// version 7 UUID postbox_uuidv7() made at its creation.
var seedOutboxSQL = `INSERT INTO email_outbox (id, kind, customer_id, invoice_id, payload, status, attempts,
	next_attempt_at, created_at, dispatched_at)
SELECT ` + uuidAt("t") + `,
	'raw', 'cus_' || (hashint4(i) & 2147483647) % $5::int,
	CASE WHEN i % 2 = 0 THEN 'in_' || i END,
	jsonb_build_object('to', 'customer' || i || '@example.com', 'subject', $6::text, 'text', $7::text),
	'dispatched', 1, t, t, t + interval '1 second'
FROM generate_series($1::int, $2::int) AS i,
	LATERAL (SELECT now() - make_interval(secs => $4::float8 * (1 - i::float8 / $3::int))) AS c(t)`

// dropIndexes drops every index and key of tables (foreign keys first) and
// returns what builds them again, from the definitions the catalog gave.
func dropIndexes(ctx context.Context, db *pgxpool.Pool, tables ...string) (restore func(context.Context) error, err error) {
	type def struct{ table, name, sql string }
	var cons, idx []def
	for _, t := range tables {
		rows, err := db.Query(ctx, `SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
WHERE conrelid = $1::regclass AND contype IN ('p', 'u', 'f') ORDER BY contype = 'f' DESC`, t)
		if err != nil {
			return nil, err
		}
		err = forEach(rows, func(name, sql string) { cons = append(cons, def{t, name, sql}) })
		if err != nil {
			return nil, err
		}
		rows, err = db.Query(ctx, `SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) FROM pg_index i
WHERE i.indrelid = $1::regclass AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)`, t)
		if err != nil {
			return nil, err
		}
		err = forEach(rows, func(name, sql string) { idx = append(idx, def{t, name, sql}) })
		if err != nil {
			return nil, err
		}
	}
	// Foreign keys of every table first: a key may be what another
	// table's foreign key points at.
	for _, fk := range []bool{true, false} {
		for _, c := range cons {
			if strings.HasPrefix(c.sql, "FOREIGN KEY") != fk {
				continue
			}
			if _, err := db.Exec(ctx, "ALTER TABLE "+c.table+" DROP CONSTRAINT "+pgx.Identifier{c.name}.Sanitize()); err != nil {
				return nil, err
			}
		}
	}
	for _, i := range idx {
		if _, err := db.Exec(ctx, "DROP INDEX "+i.name); err != nil {
			return nil, err
		}
	}
	return func(ctx context.Context) error {
		conn, err := db.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		if _, err := conn.Exec(ctx, "SET maintenance_work_mem = '1GB'"); err != nil {
			return err
		}
		for _, fk := range []bool{false, true} { // keys before the foreign keys that need them
			for _, c := range cons {
				if strings.HasPrefix(c.sql, "FOREIGN KEY") != fk {
					continue
				}
				if _, err := conn.Exec(ctx, "ALTER TABLE "+c.table+" ADD CONSTRAINT "+pgx.Identifier{c.name}.Sanitize()+" "+c.sql); err != nil {
					return fmt.Errorf("restore %s: %w", c.name, err)
				}
			}
		}
		for _, i := range idx {
			if _, err := conn.Exec(ctx, i.sql); err != nil {
				return fmt.Errorf("restore %s: %w", i.name, err)
			}
		}
		return nil
	}, nil
}

// setTriggers disables or enables (how) the user triggers of tables.
func setTriggers(ctx context.Context, db *pgxpool.Pool, how string, tables ...string) error {
	for _, t := range tables {
		if _, err := db.Exec(ctx, "ALTER TABLE "+pgx.Identifier{t}.Sanitize()+" "+how+" TRIGGER USER"); err != nil {
			return fmt.Errorf("%s the triggers of %s: %w", strings.ToLower(how), t, err)
		}
	}
	return nil
}

func forEach(rows pgx.Rows, fn func(a, b string)) error {
	var a, b string
	_, err := pgx.ForEachRow(rows, []any{&a, &b}, func() error { fn(a, b); return nil })
	return err
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// seedPool is a seed's connections: two, one per core.
func seedPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 2
	return pgxpool.NewWithConfig(ctx, cfg)
}

// hookSeedSpan is how far back the seeded webhook history reaches: inside
// WEBHOOK_HISTORY_RETENTION's default 90 days, so a worker's boot drops
// none of its attempts' weeks.
const hookSeedSpan = 85 * 24 * time.Hour

// seedHookHistory fills a migrated database with what months of webhooks
// to one endpoint leave: events delivered events spread over hookSeedSpan,
// each with its succeeded delivery and its attempt, and the dispatched
// webhook_outbox rows of the last week (the prune's default keeps no
// more). The endpoint is proven, as one that has answered for months is.
// Indexes and keys are dropped while the rows go in and built after, then
// the tables are vacuumed, frozen and analyzed, as pool-scale's seed is.
func seedHookHistory(ctx context.Context, url string, events int, logf func(string, ...any)) (time.Duration, error) {
	start := time.Now()
	db, err := seedPool(ctx, url)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	cidrs := webhook.Settings{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	ep, err := webhook.CreateEndpoint(ctx, db, cidrs, webhook.EndpointParams{URL: "http://127.0.0.1:9/seeded"})
	if err != nil {
		return 0, fmt.Errorf("seed the endpoint: %w", err)
	}
	if _, err := db.Exec(ctx, `UPDATE webhook_endpoints SET created_at = now() - $2::interval, proven_at = now() - $2::interval WHERE id = $1`, ep.ID, hookSeedSpan); err != nil {
		return 0, fmt.Errorf("seed the endpoint: %w", err)
	}
	if _, err := db.Exec(ctx, `SELECT postbox_history_partitions('webhook_delivery_attempts', now() - $1::interval, now())`, hookSeedSpan); err != nil {
		return 0, fmt.Errorf("make the seeded weeks of webhook_delivery_attempts: %w", err)
	}
	tables := []string{"webhook_delivery_attempts", "webhook_deliveries", "webhook_events", "webhook_outbox"}
	restore, err := dropIndexes(ctx, db, tables...)
	if err != nil {
		return 0, err
	}
	// The tables' own triggers check what the seed makes whole by
	// construction (one endpoint, no tenant). With the keys dropped they
	// cost more than the rows: the tenant guard joins each statement's
	// deliveries to their events, and read every event for every delivery
	// (100,000 events had not gone in after ten minutes).
	if err := setTriggers(ctx, db, "DISABLE", tables...); err != nil {
		return 0, err
	}
	const chunk = 250_000
	for lo := 0; lo < events; lo += chunk {
		hi := min(lo+chunk, events) - 1
		logf("pool webhook scale: seeding delivered events %d of %d (%s)", lo, events, time.Since(start).Round(time.Second))
		if _, err := db.Exec(ctx, seedHookSQL, lo, hi, events, hookSeedSpan.Seconds(), ep.ID); err != nil {
			return 0, fmt.Errorf("seed events %d-%d: %w", lo, hi, err)
		}
	}
	logf("pool webhook scale: seeding the last week's outbox rows (%s)", time.Since(start).Round(time.Second))
	if _, err := db.Exec(ctx, `INSERT INTO webhook_outbox (id, event_type, payload, status, attempts, next_attempt_at, created_at, dispatched_at)
SELECT id, event_type, payload, 'dispatched', 1, created_at, created_at, created_at FROM webhook_events WHERE created_at > now() - $1::interval`,
		webhook.DefaultOutboxRetention); err != nil {
		return 0, fmt.Errorf("seed webhook_outbox: %w", err)
	}
	if err := setTriggers(ctx, db, "ENABLE", tables...); err != nil {
		return 0, err
	}
	logf("pool webhook scale: building indexes (%s)", time.Since(start).Round(time.Second))
	if err := restore(ctx); err != nil {
		return 0, err
	}
	logf("pool webhook scale: vacuum, freeze, analyze (%s)", time.Since(start).Round(time.Second))
	for _, t := range append(tables, "webhook_endpoints") {
		if _, err := db.Exec(ctx, "VACUUM (FREEZE, ANALYZE) "+t); err != nil {
			return 0, fmt.Errorf("vacuum %s: %w", t, err)
		}
	}
	if _, err := db.Exec(ctx, "CHECKPOINT"); err != nil {
		logf("pool webhook scale: CHECKPOINT refused (%v)", err)
	}
	return time.Since(start), nil
}

// uuidAt is the version 7 UUID postbox_uuidv7() would have made at the
// time t names.
func uuidAt(t string) string {
	return `encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
		PLACING substring(int8send((extract(epoch FROM ` + t + `) * 1000)::bigint) FROM 3) FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid`
}

// seedHookSQL writes events $1..$2 of $3: event i was created i/$3 of the
// way from $4 seconds ago to now and delivered to endpoint $5 50 ms later
// on its first attempt. Its id is its outbox row's, as the fan-out makes
// it.
var seedHookSQL = `WITH ev AS (
	INSERT INTO webhook_events (id, event_type, payload, created_at, outbox_id)
	SELECT u, 'invoice.paid', jsonb_build_object('invoice_id', 'in_' || i, 'amount_due', 12000, 'currency', 'eur'), t, u
	FROM generate_series($1::int, $2::int) AS i,
		LATERAL (SELECT now() - make_interval(secs => $4::float8 * (1 - i::float8 / $3::int))) AS c(t),
		LATERAL (SELECT ` + uuidAt("t") + `) AS x(u)
	RETURNING id, created_at
), d AS (
	INSERT INTO webhook_deliveries (id, event_id, endpoint_id, status, attempts, created_at, delivered_at)
	SELECT ` + uuidAt("created_at") + `, id, $5::uuid, 'succeeded', 1, created_at, created_at + interval '50 milliseconds' FROM ev
	RETURNING id, delivered_at
)
INSERT INTO webhook_delivery_attempts (delivery_id, attempt, status_code, duration_ms, created_at)
SELECT id, 1, 204, 50, delivered_at FROM d`
