// Package engine is the delivery loop shared by every outbox-shaped table:
// email_outbox, webhook_outbox and webhook_deliveries run on one mechanism
// with one shape.
//
// A Source claims work (one short statement that stamps a lease, FOR UPDATE
// SKIP LOCKED: see docs/design/outbox-transport.md, Claim and lease) and
// hands it back as Units; a Lane runs a Source on one replica, starting each
// Unit on its own goroutine while it holds one of the process's Slots. Slots
// are the per-process cap (EMAIL_CONCURRENCY, WEBHOOK_CONCURRENCY): every
// Lane, drain and pass of a transport in one process shares them, however
// many River jobs run.
//
// A Lane sleeps until a Waker hears a postbox_wake notification (sent by
// the outbox tables' insert triggers, rate-limited in the database), or its
// poll comes round, or a slot frees while rows are still due. It never
// owns a row: the claim lease and the CAS marks stay the only authority
// over a row's state, so two Lanes, in one process or many, are harmless.
//
// Every goroutine a Lane starts recovers from panics: the Unit records its
// rows with the panic value and the Lane's Tally counts it, so the River job
// that ran the Lane reports the error while the process lives on.
//
// A Gate is pool-wide mutual exclusion with a lease, for periodic passes that
// must not overlap anywhere (see docs/design/outbox-transport.md, Retry
// gating).
package engine
