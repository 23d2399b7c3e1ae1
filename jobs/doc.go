// Package jobs wires postbox's transport to River: the periodic claim
// ticks, the kick jobs an Enqueue adds to the application's transaction,
// the retry worker and the pruner.
//
// A River job here only triggers work; it never owns an outbox row. The
// row's claim lease and CAS marks are authoritative, so two ticks running
// at once, a tick rescued and re-run by River, or a tick on a replica that
// just lost leadership are all harmless.
package jobs
