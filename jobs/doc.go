// Package jobs wires postbox's transport to River.
//
// Every replica drains: each process runs its own shifts — River jobs on a
// queue of its own (ReplicaQueue), one per outbox lane, each claiming for
// a window and recording what it did as its output (river.RecordOutput)
// before handing over to the next. A keeper makes sure the next shift
// exists, so delivery depends on no leader. Wake-ups come from the outbox
// tables' insert triggers through one LISTEN connection per process
// (Waker); caps are per process (the Dispatcher's and Pipeline's slots).
//
// The leader inserts the periodic passes that must not overlap pool-wide —
// the webhook retry pass and the pruner (see docs/design/outbox-transport.md,
// Retry gating) — and each pass takes a pool-wide gate before it runs, so a
// second pass started anywhere returns at once.
//
// A River job here only triggers work; it never owns an outbox row. The
// row's claim lease and CAS marks are authoritative, so two shifts running
// at once, a shift rescued and re-run by River, or a pass on a replica that
// just lost leadership are all harmless.
package jobs
