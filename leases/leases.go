package leases

import "time"

// Email per-row sub-budgets (see docs/design/outbox-transport.md, Derived
// constants). Each is enforced by a context deadline around its step;
// PerRowBudget is their sum.
//
// The five steps make 5+5+10+30+5 = 55 s; the sixth part, 5 s, is the
// row's detached mark (MarkTimeout): it runs after the send and must land
// inside the lease too, so it belongs in the row budget.
const (
	SuppressionBudget  = 5 * time.Second  // suppression-list lookup
	BrandingBudget     = 5 * time.Second  // render and branding
	DialBudget         = 10 * time.Second // SMTP TCP dial (and TLS handshake)
	ExchangeBudget     = 30 * time.Second // SMTP exchange, capped by the caller's deadline
	BounceReportBudget = 5 * time.Second  // post-send report

	PerRowBudget = SuppressionBudget + BrandingBudget + DialBudget + ExchangeBudget + BounceReportBudget + MarkTimeout
)

// Email dispatcher defaults.
const (
	BatchSize    = 5
	BatchTimeout = 300 * time.Second

	// LeaseSlack is the margin ClaimLease adds above the batch's worst case,
	// so a batch that ends exactly on its timeout still marks inside the lease.
	LeaseSlack = 60 * time.Second
)

// MarkTimeout bounds every detached CAS mark (see
// docs/design/outbox-transport.md, Detached marks).
const MarkTimeout = 5 * time.Second

// Webhook constants. The two leases are deliberately separate: one sized for
// a retry batch would starve first delivery; one sized for birth would let
// the retry worker double-POST under a slow batch.
const (
	BirthLeaseWindow = 120 * time.Second // a new delivery row is leased to its in-process first attempt
	DeliveryBudget   = 13 * time.Second  // one HTTP attempt, end to end
	RetryClaimBatch  = 10
)
