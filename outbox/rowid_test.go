package outbox

import (
	"context"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// uuidTime is the millisecond timestamp of a version 7 UUID, and whether id
// is one.
func uuidTime(id string) (time.Time, bool) {
	b, err := hex.DecodeString(strings.ReplaceAll(id, "-", ""))
	if err != nil || len(b) != 16 || b[6]>>4 != 7 || b[8]>>6 != 2 {
		return time.Time{}, false
	}
	var ms int64
	for _, c := range b[:6] {
		ms = ms<<8 | int64(c)
	}
	return time.UnixMilli(ms), true
}

// Row ids — Enqueue's and plain SQL's alike — are version 7 UUIDs that
// start with the time they were made, so new rows' index entries go to the
// right-hand edge of the primary keys (migration 00011).
func TestRowIDs_StartWithTheirTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	before := time.Now().Add(-time.Second)
	ids := []string{newRowID()}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	id, err := Enqueue(ctx, tx, Email{Payload: Payload{To: "ada@example.com", Subject: "Hi", Text: "Hello"}})
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, id)
	for _, table := range []string{"email_outbox", "webhook_outbox", "webhook_events"} {
		var id string
		sql := `INSERT INTO ` + table + ` (event_type, payload) VALUES ('t', '{}') RETURNING id::text`
		if table == "email_outbox" {
			sql = `INSERT INTO email_outbox (payload) VALUES ('{"to":"a@example.com","subject":"s","text":"t"}') RETURNING id::text`
		}
		if err := tx.QueryRow(ctx, sql).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	after := time.Now().Add(time.Second)
	for _, id := range ids {
		at, ok := uuidTime(id)
		if !ok || at.Before(before) || at.After(after) {
			t.Errorf("id %s: not a version 7 UUID of now (%v, %s)", id, ok, at)
		}
	}
	first := newRowID()
	time.Sleep(2 * time.Millisecond) // simulates: time passing between two ids, past the millisecond they carry
	if second := newRowID(); second <= first {
		t.Errorf("ids made 2 ms apart do not sort in time: %s then %s", first, second)
	}
	var def string
	if err := tx.QueryRow(ctx, `SELECT column_default FROM information_schema.columns
WHERE table_name = 'webhook_deliveries' AND column_name = 'id'`).Scan(&def); err != nil || def != "postbox_uuidv7()" {
		t.Errorf("webhook_deliveries.id defaults to %q (%v), want postbox_uuidv7()", def, err)
	}
}

// A row's claim and mark write its new versions on the page its insert
// wrote (fillfactor, migration 00011), not on whatever page the free space
// map names: on a table of millions of sent rows that page is one to read
// from disk and write to the WAL in full.
func TestRowVersions_StayOnTheirPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	moved := 0
	const rows = 300
	for range rows {
		var id, page string
		if err := pool.QueryRow(ctx, `INSERT INTO email_outbox (customer_id, payload)
VALUES ('cus', jsonb_build_object('to', 'a@example.com', 'subject', 's', 'text', repeat('x', 300)))
RETURNING id::text, (ctid::text::point)[0]::text`).Scan(&id, &page); err != nil {
			t.Fatal(err)
		}
		if _, err := Claim(ctx, pool, 1, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := Mark(ctx, pool, id, Result{Outcome: OutcomeSent}); err != nil {
			t.Fatal(err)
		}
		var now string
		if err := pool.QueryRow(ctx, `SELECT (ctid::text::point)[0]::text FROM email_outbox WHERE id = $1`, id).Scan(&now); err != nil {
			t.Fatal(err)
		}
		if now != page {
			moved++
		}
	}
	if moved > rows/100 {
		t.Errorf("%d of %d rows' sent versions left the page their insert wrote", moved, rows)
	}
}
