package soak

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// load is the soak's rows, generated up front from the seed: their ids
// are chosen here, so an INSERT retried after a connection broke mid-commit
// (the Postgres restart) is idempotent, and every id enqueued is known.
type load struct {
	emails    []string
	permanent map[string]bool // the SMTPPermanent share of emails, always answered 550
	events    []string

	emailsIn, eventsIn atomic.Int64 // committed so far
}

func newLoad(rng *rand.Rand, emails, events int, permanentShare float64) *load {
	l := &load{emails: make([]string, emails), events: make([]string, events), permanent: map[string]bool{}}
	for i := range l.emails {
		l.emails[i] = uuid(rng)
	}
	for i := range l.events {
		l.events[i] = uuid(rng)
	}
	n := int(math.Round(float64(emails) * permanentShare))
	for _, i := range rng.Perm(emails)[:n] {
		l.permanent[l.emails[i]] = true
	}
	return l
}

func (l *load) permanentIDs() []string {
	ids := make([]string, 0, len(l.permanent))
	for id := range l.permanent {
		ids = append(ids, id)
	}
	return ids
}

func (l *load) emailsEnqueued() int { return int(l.emailsIn.Load()) }
func (l *load) eventsEnqueued() int { return int(l.eventsIn.Load()) }
func (l *load) done() bool {
	return l.emailsEnqueued() == len(l.emails) && l.eventsEnqueued() == len(l.events)
}

// enqueue inserts the rows at an even pace over spread from start, by
// plain SQL (the enqueue path is not what is soaked). A batch that fails —
// Postgres restarting — is retried until it commits or ctx ends.
func (l *load) enqueue(ctx context.Context, pool *pgxpool.Pool, start time.Time, spread time.Duration, logf func(string, ...any)) {
	const maxBatch = 500
	target := func(total int) int {
		if spread <= 0 {
			return total
		}
		n := int(math.Ceil(float64(total) * float64(time.Since(start)) / float64(spread)))
		return min(n, total)
	}
	failing := false
	for !l.done() {
		e := min(target(len(l.emails)), l.emailsEnqueued()+maxBatch)
		v := min(target(len(l.events)), l.eventsEnqueued()+maxBatch)
		err := l.insert(ctx, pool, l.emails[l.emailsEnqueued():e], l.events[l.eventsEnqueued():v])
		switch {
		case err == nil:
			l.emailsIn.Store(int64(e))
			l.eventsIn.Store(int64(v))
			if failing {
				logf("enqueue works again")
				failing = false
			}
		case ctx.Err() != nil:
			logf("enqueue stopped: %v (%d/%d emails, %d/%d events in)", ctx.Err(),
				l.emailsEnqueued(), len(l.emails), l.eventsEnqueued(), len(l.events))
			return
		case !failing:
			logf("enqueue failed, retrying: %s", firstLine(err.Error()))
			failing = true
		}
		if l.done() {
			return
		}
		if sleepUntil(ctx, time.Now().Add(200*time.Millisecond)) != nil && ctx.Err() != nil {
			logf("enqueue stopped: %v", ctx.Err())
			return
		}
	}
}

// insert commits one slice of emails and events in one transaction.
func (l *load) insert(ctx context.Context, pool *pgxpool.Pool, emails, events []string) error {
	if len(emails) == 0 && len(events) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if len(emails) > 0 {
		// payload: what a plain INSERT needs (DESIGN.md, data contract).
		if _, err := tx.Exec(ctx, `INSERT INTO email_outbox (id, kind, customer_id, payload)
SELECT id, 'raw', 'cus_soak', jsonb_build_object('to', 'soak+' || id || '@example.com',
	'subject', 'soak ' || id, 'text', 'A soak message. Row ' || id || '.')
FROM unnest($1::uuid[]) AS t(id)
ON CONFLICT (id) DO NOTHING`, emails); err != nil {
			return fmt.Errorf("insert emails: %w", err)
		}
	}
	if len(events) > 0 {
		if _, err := tx.Exec(ctx, `INSERT INTO webhook_outbox (id, event_type, payload)
SELECT id, 'soak.event', jsonb_build_object('outbox_id', id)
FROM unnest($1::uuid[]) AS t(id)
ON CONFLICT (id) DO NOTHING`, events); err != nil {
			return fmt.Errorf("insert events: %w", err)
		}
	}
	return tx.Commit(ctx)
}

// uuid is a version 4 UUID from rng, so a seed reproduces the ids.
func uuid(rng *rand.Rand) string {
	var b [16]byte
	for i := 0; i < 16; i += 8 {
		v := rng.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
