// Package bench measures postbox against the alternative a user would pick
// instead — one River job per message — on one database in one run, and
// prints one table. `go run ./internal/tooling/cmd/bench` is its command line; docs/PERFORMANCE.md
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
//     the wake-up trigger, against River InsertTx per transaction.
//   - latency: an open-loop load generator at fixed rates, enqueue commit →
//     SMTP DATA accepted, through an in-process lane woken by the trigger.
//   - webhook: events × endpoints fanned out to loopback receivers.
//   - ceiling: single-row autocommit UPDATEs at the dispatcher's concurrency,
//     the upper bound of anything that commits once per row.
//
// With --pool (RunPool) the sections are instead the pool's, run as a user
// runs them: the real `worker run` binary, built from this module, R
// processes on a fresh database, each sending to its own SMTP sink port
// (smtpsink with a per-message DataDelay, so the relay's limit is
// EMAIL_CONCURRENCY × R ÷ delay), beside the River peer run as processes
// too (internal/tooling/cmd/riverpeer, MaxWorkers = EMAIL_CONCURRENCY per
// process, River's defaults and River tuned):
//
//   - pool-backlog: N rows (or jobs) inserted before the processes start;
//     throughput from the first exec and from the first to the last send,
//     each replica's share, peak SMTP connections, ratios to the peer.
//   - pool-latency: an open-loop load at each rate, plain SQL INSERT and
//     outbox.Enqueue (the peer: InsertTx), commit → DATA accepted.
//   - pool-enqueue: outbox.Enqueue from 30 goroutines with the
//     email_outbox_wake trigger enabled and disabled.
//   - pool-leaderkill: a steady load, SIGKILL of the River leader, the
//     longest gap between deliveries; every row must arrive once the
//     survivors (and the dead replica's claim lease) allow.
//   - pool-pgbouncer (only with --only): N emails and N/5 webhook events
//     to 2 receivers drained by R processes directly and through a real
//     PgBouncer in transaction mode (DATABASE_POOL_MODE=transaction), with
//     wake-ups by LISTEN on DATABASE_DIRECT_URL and by polling, alternating
//     per trial: msg/s, the ratio to direct, machine CPU per message, the
//     pooler's busiest moment; a message lost or sent twice fails the run.
//   - pool-webhook (only with --only): a backlog of webhook events (plain
//     SQL and webhook.Enqueue) to 1 and 10 loopback endpoints per event,
//     drained by 1 and 3 processes (and the River peer, one job per
//     delivery): deliveries/s, the machine's CPU per delivery, each
//     replica's share (told apart by WEBHOOK_USER_AGENT), the ratio of 3
//     replicas to 1; then one replica's CPU per delivery with a receiver
//     answering at once.
//   - pool-webhook-ratelimit, pool-webhook-retry, pool-webhook-breaker
//     (only with --only): a 10/s rate-limited endpoint counted per second
//     and per 5 s window; the time from a retry's due time to its arrival;
//     a flaky, a fail-first and an always-failing receiver with the
//     endpoint breaker on and off.
//   - pool-webhook-ordered (only with --only): one endpoint's backlog
//     unordered, spread over four ordering keys per attempt slot, and the
//     same beside one hot key; every key's order read at the receiver (an
//     inversion fails the run), the ratio of ordered to unordered, the hot
//     key's pace against its receiver's and the other keys' rate beside it,
//     with the River peer (one job per delivery, unordered) in each trial.
//   - pool-lowrate (only with --only): one replica, the relay answering at
//     once, 1, 20 and 200 msg/s by plain SQL for a minute each, then each
//     product idle, postbox beside one River job per message (defaults):
//     the machine's CPU per message and who spent it (the product's
//     processes, their Postgres backends, the bench, the rest),
//     statements per message (pg_stat_statements where the server
//     preloads it, else transactions), p99 and the slowest message.
//   - pool-fair (only with --only): one replica; customer A enqueues
//     20,000 invoices at once, then customer B a password reset and an
//     invoice every second for a minute, with EMAIL_RATE_LIMIT=50 and a
//     relay answering at once, and again with no limit and a 50 ms relay:
//     B's commit → DATA per kind, A's rate (or all rows') at the relay
//     meanwhile, the machine's CPU per message; postbox beside the previous
//     release (first come, first served, given its binary) and River with
//     job priorities (and, for the limit, a per-process rate limiter), and
//     postbox again with a snapshot held.
//   - pool-webhook-fair (only with --only): one replica,
//     WEBHOOK_CONCURRENCY=32; tenant A's endpoint answers after 2 s, ten
//     other tenants' after 20 ms. A enqueues 20,000 events at once, then
//     the others 5 events a second each for a minute: their commit →
//     request p99, and the requests A's receiver holds (read every
//     50 ms) against A's max-min fair share, 32 less what the others
//     held; A alone, its peak and mean requests in flight; A's backlog
//     of 100,000 events to a 20 ms endpoint, then B's single events a
//     second apart, commit → request. Postbox beside a previous build
//     (given its binary) and River, one job per delivery; with
//     --webhook-fair-hold, the slow tenant's case and the backlog's again
//     for postbox with a snapshot held (every path with
//     --webhook-fair-hold-all).
//   - pool-api (only with --only): webhook.EnqueueEvent against POST
//     /api/v1/events from EnqueueGoroutines goroutines (keep-alive, 1 KB
//     payloads), one `worker run` fanning out meanwhile; the ratio, p50/p99
//     answer times, the machine's CPU per enqueue and who spent it, and a
//     request given up after 1 ms retried with its Idempotency-Key (one row).
//
// Nothing here asserts a timing: the test runs a tiny preset and checks only
// the correctness counts.
package bench
