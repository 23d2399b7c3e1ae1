// Package history keeps the append-only history tables bounded: the
// attempt log of emails (email_attempts), their delivery events
// (email_events) and the attempt log of webhook deliveries
// (webhook_delivery_attempts).
//
// Each is partitioned by week on its time column (migration 00018), with
// no default partition. Ensure makes the weeks ahead, so a mark always has
// a week to write into; Drop detaches and drops the weeks wholly past
// their retention, which costs a catalog change rather than a DELETE of
// millions of rows, and records what it dropped in
// postbox_history_dropped, so that readers can say a row's history is gone
// rather than show it as never made (Dropped).
//
// The worker runs both in a gated maintenance pass (jobs.HistoryArgs), and
// Ensure again at every boot.
package history
