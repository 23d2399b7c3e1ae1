// Package mailevents takes delivery events — deliveries, bounces, spam
// complaints, deferrals — back from the providers that sent postbox's email,
// and records them with outbox.RecordEvent, which correlates each to its
// email_outbox row and keeps the suppression list.
//
// One endpoint per provider, each authenticated the way that provider
// signs, all under Handler:
//
//	POST /events/postmark  Postmark's bounce, delivery and spam-complaint webhooks; HTTP basic auth
//	POST /events/ses       Amazon SES notifications through an SNS HTTPS subscription; the SNS
//	                       message signature (SignatureVersion 1 and 2) verified against its
//	                       signing certificate, fetched over HTTPS from sns.<region>.amazonaws.com only
//	POST /events/generic   one event as postbox's own JSON, signed with Standard Webhooks
//
// Every endpoint answers the same way: 413 for a body over MaxBodyBytes,
// 401 or 403 for missing or bad credentials or signatures, 400 for a body
// that does not parse as the provider's format, 404 for a provider that is
// not configured — and none of those writes anything. A verified, well-formed
// body answers 200 once its events are recorded (a replay records nothing
// again: the provider's event id is unique), and 500 when the database
// failed, so the provider retries.
//
// Correlation: postbox sends the row id as the Message-ID's left half
// (<row-id@domain>) and in the X-Postbox-Row header (smtp.RowHeader). A
// provider that echoes headers (SES with original headers, Postmark's
// bounce content or metadata) names the row; otherwise the provider's own
// message id is matched against the row of an earlier event from the same
// provider about the same message. An event whose row is still unknown is
// stored as an orphan (row_id NULL, the key it carried in ref) and counted,
// never dropped on arrival; the prune pass deletes orphans older than
// EVENTS_ORPHAN_RETENTION (Settings.OrphanRetention, 30 days by default).
//
// When the identifiers disagree, the first X-Postbox-Row holding a row id
// wins, even if no such row exists (then the provider's message id decides,
// or the event is an orphan); else the Message-ID (in a dump, the last of
// postbox's shape); else the provider's message id (TestCorrelation_Precedence).
package mailevents
