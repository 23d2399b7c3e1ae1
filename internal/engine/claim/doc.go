// Package claim is the claim-lease and CAS-mark machinery shared by every
// outbox-shaped table (email_outbox, webhook_outbox, webhook_deliveries).
//
// A claim is one short statement — its own transaction — that stamps a
// lease on up to n pending, due rows taken FOR UPDATE SKIP LOCKED and
// increments their attempts; it commits before any send. The lease is both
// the crash-recovery bound and the cross-worker exclusion: a row whose
// worker dies becomes due again when its lease expires. A mark is a
// compare-and-set UPDATE … WHERE status = 'pending' run on a detached
// context (MarkContext), so work already performed is always recorded and a
// stale writer is dropped rather than applied.
package claim
