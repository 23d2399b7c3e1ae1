// Package backlog is the operator's read side across the outbox tables:
// rows per status, how many are due and how long the oldest has waited,
// recent errors, the rows that failed for good, and the Prometheus gauges
// built from the cheap part of that. `worker stats`, `worker failed`,
// /metrics and the console read it; none of it takes part in delivery.
package backlog
