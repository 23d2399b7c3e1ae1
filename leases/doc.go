// Package leases holds the derived timing constants and the invariant chain
// that ties them together (see docs/design/outbox-transport.md, Derived
// constants).
//
// Every budget in postbox is derived here, never hand-tuned at a call site:
// the email per-row budget is the sum of its named parts, the claim lease is
// derived from the batch size, and the webhook side keeps two separate
// leases (birth and retry) because one constant provably cannot serve both.
//
// The chain BatchSize×PerRowBudget ≤ BatchTimeout < ClaimLease(BatchSize)
// is what makes a claimed row safe: a batch finishes (or gives up) before its
// rows' leases expire, so a sibling worker never re-claims a row that is
// still being sent. Validate checks the chain and names the link that breaks.
package leases
