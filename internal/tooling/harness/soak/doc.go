// Package soak is postbox's crash-safety soak (DESIGN.md, Targets: crash
// safety): several `worker run` processes drain both outboxes while the
// harness kill -9s one of them every few seconds, restarts Postgres once, and
// the far ends misbehave — an SMTP sink that answers 451, 550 or never
// answers, and webhook receivers that answer 500 or time out. When every row
// is terminal it tallies what happened and checks the transport's promise
// (see docs/design/outbox-transport.md, Redelivery semantics):
//
//   - no row is lost: every email and webhook row reaches a terminal state,
//     and every row recorded as sent really reached the sink or receiver;
//   - every duplicate is explained: between two acceptances of the same row
//     there is a crash (a kill -9 or a worker that died on its own), the
//     Postgres restart, or a lease expiry (a worker logged that the row's
//     mark was lost or dropped as stale) — each event explaining at most one
//     duplicate per row;
//   - failed emails are exactly the rows the sink answered with a permanent
//     550, and every such row failed;
//   - each webhook_outbox row produced exactly one event.
//
// Run starts everything itself: its own throwaway Postgres cluster (it
// restarts it, so it never touches a shared server), the sink and the
// receivers in this process, and the workers as child processes of the
// binary it is given. Only 127.0.0.1 is ever contacted. `go run ./internal/tooling/cmd/soak` is the
// command; cmd/worker's TestSoak_CrashesAndFaultsLoseNothing runs a
// CI-sized soak. docs/SOAK.md explains the sizing.
package soak
