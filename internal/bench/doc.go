// Package bench measures postbox against the alternative a user would pick
// instead — one River job per message — on one database in one run, and
// prints one table. `worker bench` is its command line; docs/PERFORMANCE.md
// holds a run and explains what bounds each figure.
//
// Sections, run one after another on the same database (truncated between
// them):
//
//   - email: N queued rows drained to an in-process SMTP sink by
//     outbox.Dispatcher.Drain, against N River jobs (each inserted by InsertTx
//     in its own transaction) worked by a River client tuned for speed that
//     sends the same message to the same kind of sink through the same
//     smtp.Mailer configuration. Every path checks its counts (rows
//     dispatched, messages received, duplicates) and fails the run when they
//     are wrong: a benchmark that does not check correctness can lie.
//   - enqueue: outbox.Enqueue per application transaction, with and without
//     the EmailKick River job, against River InsertTx per transaction.
//   - latency: an open-loop load generator at fixed rates, enqueue commit →
//     SMTP DATA accepted, with the periodic tick and with the kick.
//   - webhook: events × endpoints fanned out to loopback receivers.
//   - ceiling: single-row autocommit UPDATEs at the dispatcher's concurrency,
//     the upper bound of anything that commits once per row.
//
// Nothing here asserts a timing: the test runs a tiny preset and checks only
// the correctness counts.
package bench
