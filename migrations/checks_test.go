package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// checkFixture is one row of each table the cases update or point at, with
// known ids, inserted afresh in each case's transaction.
const checkFixture = `
INSERT INTO email_outbox (id, payload) VALUES ('00000000-0000-7000-8000-000000000001', '{}');
INSERT INTO webhook_endpoints (id, url, secret) VALUES ('00000000-0000-7000-8000-000000000002', 'https://example.com/in', 'whsec_dGVzdA==');
INSERT INTO webhook_events (id, event_type, payload) VALUES ('00000000-0000-7000-8000-000000000003', 'invoice.paid', '{}');
INSERT INTO webhook_deliveries (id, event_id, endpoint_id) VALUES ('00000000-0000-7000-8000-000000000004', '00000000-0000-7000-8000-000000000003', '00000000-0000-7000-8000-000000000002');
INSERT INTO webhook_outbox (id, event_type, payload) VALUES ('00000000-0000-7000-8000-000000000005', 'invoice.paid', '{}');
INSERT INTO email_suppressions (email) VALUES ('fixture@example.com');
`

// Fixture rows, for the cases' UPDATEs and foreign keys.
const (
	fxEmail    = `'00000000-0000-7000-8000-000000000001'`
	fxEndpoint = `'00000000-0000-7000-8000-000000000002'`
	fxDelivery = `'00000000-0000-7000-8000-000000000004'`
	fxOutbox   = `'00000000-0000-7000-8000-000000000005'`
)

// checkCase is one CHECK constraint: statements that break only it, each
// refused naming it, and statements at its edge that keep it.
type checkCase struct {
	constraint string
	bad, good  []string
}

// The statements that shape these cases, so each reads as the column it
// checks.
func insEvent(cols, vals string) string {
	return `INSERT INTO email_events (type, provider, provider_event_id` + cols + `) VALUES ('delivered', 'ses', gen_random_uuid()::text` + vals + `)`
}

func insProvider(provider string) string {
	return `INSERT INTO email_events (type, provider, provider_event_id) VALUES ('delivered', ` + provider + `, 'e1')`
}

func insAttempt(cols, vals string) string {
	return `INSERT INTO webhook_delivery_attempts (delivery_id, attempt, duration_ms` + cols + `) VALUES (` + fxDelivery + `, 1, 0` + vals + `)`
}

func insLog(cols, vals string) string {
	return `INSERT INTO email_suppression_log (email, action` + cols + `) VALUES ('ada@example.com', 'added'` + vals + `)`
}

func insRequeue(vals string) string {
	return `INSERT INTO email_requeues (row_id, from_status, attempt, actor) VALUES (` + fxEmail + `, ` + vals + `)`
}

func setEndpoint(set string) string {
	return `UPDATE webhook_endpoints SET ` + set + ` WHERE id = ` + fxEndpoint
}

// checkCases covers every CHECK constraint in migrations/sql (the test
// below fails if the catalog holds one that is not here). The bad and good
// statements sit on either side of each bound, so a bound that moves —
// not only one that is dropped — is caught.
var checkCases = []checkCase{
	// 00001: email_outbox and email_suppressions.
	// 00015 replaced 00001's list of kinds with a format: a plain identifier.
	{"email_outbox_kind_format",
		[]string{
			`INSERT INTO email_outbox (kind, payload) VALUES ('Receipt', '{}')`,
			`INSERT INTO email_outbox (kind, payload) VALUES ('1receipt', '{}')`,
			`INSERT INTO email_outbox (kind, payload) VALUES ('re-ceipt', '{}')`,
			`INSERT INTO email_outbox (kind, payload) VALUES ('', '{}')`,
			`INSERT INTO email_outbox (kind, payload) VALUES ('r' || repeat('x', 64), '{}')`,
		},
		[]string{
			`INSERT INTO email_outbox (kind, payload) VALUES ('member_invite', '{}')`,
			`INSERT INTO email_outbox (kind, payload) VALUES ('newsletter', '{}')`,
			`INSERT INTO email_outbox (kind, payload) VALUES ('r' || repeat('x', 63), '{}')`,
			`INSERT INTO email_outbox (kind, payload) VALUES ('a', '{}')`,
		}},
	{"email_outbox_payload_check",
		[]string{`INSERT INTO email_outbox (payload) VALUES ('[]')`, `INSERT INTO email_outbox (payload) VALUES ('"text"')`},
		[]string{`INSERT INTO email_outbox (payload) VALUES ('{}')`}},
	// 00016 replaced 00001's status list with one that adds cancelled.
	{"email_outbox_status_values",
		[]string{`UPDATE email_outbox SET status = 'sent' WHERE id = ` + fxEmail},
		[]string{`UPDATE email_outbox SET status = 'failed' WHERE id = ` + fxEmail,
			`UPDATE email_outbox SET status = 'cancelled', cancelled_at = now(), cancelled_by = 'alice' WHERE id = ` + fxEmail}},
	// 00016: cancelled exactly when cancelled_at and cancelled_by are set;
	// who is 1..200 bytes.
	{"email_outbox_cancelled_check",
		[]string{
			`UPDATE email_outbox SET status = 'cancelled' WHERE id = ` + fxEmail,
			`UPDATE email_outbox SET status = 'cancelled', cancelled_at = now() WHERE id = ` + fxEmail,
			`UPDATE email_outbox SET cancelled_at = now(), cancelled_by = 'alice' WHERE id = ` + fxEmail,
			`UPDATE email_outbox SET status = 'cancelled', cancelled_at = now(), cancelled_by = '' WHERE id = ` + fxEmail,
			`UPDATE email_outbox SET status = 'cancelled', cancelled_at = now(), cancelled_by = repeat('a', 201) WHERE id = ` + fxEmail,
		},
		[]string{
			`UPDATE email_outbox SET status = 'cancelled', cancelled_at = now(), cancelled_by = repeat('a', 200) WHERE id = ` + fxEmail,
			`UPDATE email_outbox SET status = 'cancelled', cancelled_at = now(), cancelled_by = 'a' WHERE id = ` + fxEmail,
		}},
	{"email_outbox_attempts_check",
		[]string{`UPDATE email_outbox SET attempts = -1 WHERE id = ` + fxEmail},
		[]string{`UPDATE email_outbox SET attempts = 0 WHERE id = ` + fxEmail}},
	// Dispatched exactly when dispatched_at is set; a skipped row may be
	// either.
	{"email_outbox_check",
		[]string{
			`UPDATE email_outbox SET status = 'dispatched' WHERE id = ` + fxEmail,
			`INSERT INTO email_outbox (payload, dispatched_at) VALUES ('{}', now())`,
		},
		[]string{
			`UPDATE email_outbox SET status = 'dispatched', dispatched_at = now() WHERE id = ` + fxEmail,
			`INSERT INTO email_outbox (payload, status) VALUES ('{}', 'skipped')`,
			`INSERT INTO email_outbox (payload, status, dispatched_at) VALUES ('{}', 'skipped', now())`,
		}},
	{"email_suppressions_email_check",
		[]string{`INSERT INTO email_suppressions (email) VALUES ('Ada@example.com')`, `INSERT INTO email_suppressions (email) VALUES ('')`},
		[]string{`INSERT INTO email_suppressions (email) VALUES ('ada@example.com')`}},

	// 00002: webhooks.
	{"webhook_endpoints_url_check",
		[]string{setEndpoint(`url = 'ftp://example.com/in'`), setEndpoint(`url = 'example.com/in'`)},
		[]string{setEndpoint(`url = 'http://example.com/in'`)}},
	// The underscore is escaped: whsec followed by any other character is
	// refused.
	{"webhook_endpoints_secret_check",
		[]string{setEndpoint(`secret = 'plain'`), setEndpoint(`secret = 'whsecXdGVzdA=='`)},
		[]string{setEndpoint(`secret = 'whsec_c2Vjb25k'`)}},
	{"webhook_outbox_event_type_check",
		[]string{`INSERT INTO webhook_outbox (event_type, payload) VALUES ('', '{}')`},
		[]string{`INSERT INTO webhook_outbox (event_type, payload) VALUES ('a', '{}')`}},
	// 00016 replaced 00002's status list with one that adds cancelled.
	{"webhook_outbox_status_values",
		[]string{`UPDATE webhook_outbox SET status = 'skipped' WHERE id = ` + fxOutbox},
		[]string{`UPDATE webhook_outbox SET status = 'failed' WHERE id = ` + fxOutbox,
			`UPDATE webhook_outbox SET status = 'cancelled', cancelled_at = now(), cancelled_by = 'alice' WHERE id = ` + fxOutbox}},
	{"webhook_outbox_cancelled_check",
		[]string{
			`UPDATE webhook_outbox SET status = 'cancelled' WHERE id = ` + fxOutbox,
			`UPDATE webhook_outbox SET status = 'cancelled', cancelled_by = 'alice' WHERE id = ` + fxOutbox,
			`UPDATE webhook_outbox SET cancelled_at = now(), cancelled_by = 'alice' WHERE id = ` + fxOutbox,
			`UPDATE webhook_outbox SET status = 'cancelled', cancelled_at = now(), cancelled_by = '' WHERE id = ` + fxOutbox,
			`UPDATE webhook_outbox SET status = 'cancelled', cancelled_at = now(), cancelled_by = repeat('a', 201) WHERE id = ` + fxOutbox,
		},
		[]string{
			`UPDATE webhook_outbox SET status = 'cancelled', cancelled_at = now(), cancelled_by = repeat('a', 200) WHERE id = ` + fxOutbox,
		}},
	{"webhook_outbox_attempts_check",
		[]string{`UPDATE webhook_outbox SET attempts = -1 WHERE id = ` + fxOutbox},
		[]string{`UPDATE webhook_outbox SET attempts = 0 WHERE id = ` + fxOutbox}},
	{"webhook_events_event_type_check",
		[]string{`INSERT INTO webhook_events (event_type, payload) VALUES ('', '{}')`},
		[]string{`INSERT INTO webhook_events (event_type, payload) VALUES ('a', '{}')`}},
	{"webhook_deliveries_status_check",
		[]string{`UPDATE webhook_deliveries SET status = 'dispatched' WHERE id = ` + fxDelivery},
		[]string{`UPDATE webhook_deliveries SET status = 'succeeded' WHERE id = ` + fxDelivery}},
	{"webhook_deliveries_attempts_check",
		[]string{`UPDATE webhook_deliveries SET attempts = -1 WHERE id = ` + fxDelivery},
		[]string{`UPDATE webhook_deliveries SET attempts = 0 WHERE id = ` + fxDelivery}},
	{"webhook_delivery_attempts_attempt_check",
		[]string{`INSERT INTO webhook_delivery_attempts (delivery_id, attempt, duration_ms) VALUES (` + fxDelivery + `, 0, 0)`},
		[]string{`INSERT INTO webhook_delivery_attempts (delivery_id, attempt, duration_ms) VALUES (` + fxDelivery + `, 1, 0)`}},
	// NULL is an attempt that got no answer.
	{"webhook_delivery_attempts_status_code_check",
		[]string{insAttempt(`, status_code`, `, 99`), insAttempt(`, status_code`, `, 600`)},
		[]string{insAttempt(`, status_code`, `, 100`), insAttempt(`, status_code`, `, 599`), insAttempt(`, status_code`, `, NULL`)}},
	{"webhook_delivery_attempts_duration_ms_check",
		[]string{`INSERT INTO webhook_delivery_attempts (delivery_id, attempt, duration_ms) VALUES (` + fxDelivery + `, 1, -1)`},
		[]string{`INSERT INTO webhook_delivery_attempts (delivery_id, attempt, duration_ms) VALUES (` + fxDelivery + `, 1, 0)`}},
	// Bytes, not characters: 2049 two-byte characters are over.
	{"webhook_delivery_attempts_response_excerpt_check",
		[]string{insAttempt(`, response_excerpt`, `, repeat('x', 4097)`), insAttempt(`, response_excerpt`, `, repeat('é', 2049)`)},
		[]string{insAttempt(`, response_excerpt`, `, repeat('x', 4096)`), insAttempt(`, response_excerpt`, `, repeat('é', 2048)`)}},

	// 00006: the Go API's rules for plain SQL. NOT VALID, so they bind new
	// rows and every UPDATE.
	{"webhook_endpoints_url_rules",
		[]string{setEndpoint(`url = 'https://user:pass@example.com/in'`), setEndpoint(`url = 'https://example.com/in#part'`)},
		[]string{setEndpoint(`url = 'https://example.com/in?notify=ops@example.com'`)}},
	{"webhook_outbox_event_type_format",
		[]string{
			`INSERT INTO webhook_outbox (event_type, payload) VALUES (repeat('a', 201), '{}')`,
			`INSERT INTO webhook_outbox (event_type, payload) VALUES ('invoice paid', '{}')`,
			`INSERT INTO webhook_outbox (event_type, payload) VALUES (E'invoice\tpaid', '{}')`,
			`UPDATE webhook_outbox SET event_type = E'invoice\x7fpaid' WHERE id = ` + fxOutbox,
		},
		[]string{`INSERT INTO webhook_outbox (event_type, payload) VALUES (repeat('a', 200), '{}')`}},
	// {"b": "…"} is nine bytes of JSON text around the string.
	{"webhook_outbox_payload_size",
		[]string{`INSERT INTO webhook_outbox (event_type, payload) VALUES ('big', jsonb_build_object('b', repeat('x', 262136)))`},
		[]string{`INSERT INTO webhook_outbox (event_type, payload) VALUES ('big', jsonb_build_object('b', repeat('x', 262135)))`}},
	// Measured as jsonb, whose framing of one key is a few dozen bytes.
	{"email_outbox_payload_size",
		[]string{`INSERT INTO email_outbox (payload) VALUES (jsonb_build_object('text', repeat('x', 10551296)))`},
		[]string{`INSERT INTO email_outbox (payload) VALUES (jsonb_build_object('text', repeat('x', 10551296 - 64)))`}},

	// 00007: email events and suppressions.
	{"email_events_ref_check",
		[]string{insEvent(`, ref`, `, repeat('r', 1025)`)},
		[]string{insEvent(`, ref`, `, repeat('r', 1024)`)}},
	{"email_events_type_check",
		[]string{`INSERT INTO email_events (type, provider, provider_event_id) VALUES ('opened', 'ses', 'e1')`},
		[]string{`INSERT INTO email_events (type, provider, provider_event_id) VALUES ('deferred', 'ses', 'e1')`}},
	{"email_events_bounce_class_check",
		[]string{`INSERT INTO email_events (type, bounce_class, provider, provider_event_id) VALUES ('bounced', 'medium', 'ses', 'e1')`},
		[]string{`INSERT INTO email_events (type, bounce_class, provider, provider_event_id) VALUES ('bounced', 'soft', 'ses', 'e1')`}},
	{"email_events_provider_check",
		[]string{insProvider(`'SES'`), insProvider(`'1ses'`), insProvider(`'a' || repeat('b', 32)`)},
		[]string{insProvider(`'a' || repeat('b', 31)`), insProvider(`'my_esp-2'`)}},
	{"email_events_provider_event_id_check",
		[]string{
			`INSERT INTO email_events (type, provider, provider_event_id) VALUES ('delivered', 'ses', '')`,
			`INSERT INTO email_events (type, provider, provider_event_id) VALUES ('delivered', 'ses', repeat('e', 1025))`,
		},
		[]string{`INSERT INTO email_events (type, provider, provider_event_id) VALUES ('delivered', 'ses', repeat('e', 1024))`}},
	{"email_events_provider_message_id_check",
		[]string{insEvent(`, provider_message_id`, `, repeat('m', 1025)`)},
		[]string{insEvent(`, provider_message_id`, `, repeat('m', 1024)`)}},
	{"email_events_recipient_check",
		[]string{insEvent(`, recipient`, `, 'Ada@example.com'`), insEvent(`, recipient`, `, repeat('a', 1025)`)},
		[]string{insEvent(`, recipient`, `, repeat('a', 1024)`)}},
	{"email_events_detail_check",
		[]string{insEvent(`, detail`, `, repeat('d', 1025)`)},
		[]string{insEvent(`, detail`, `, repeat('d', 1024)`)}},
	{"email_events_raw_excerpt_check",
		[]string{insEvent(`, raw_excerpt`, `, repeat('x', 4097)`)},
		[]string{insEvent(`, raw_excerpt`, `, repeat('x', 4096)`)}},
	// A bounce has a class; nothing else does.
	{"email_events_check",
		[]string{
			`INSERT INTO email_events (type, provider, provider_event_id) VALUES ('bounced', 'ses', 'e1')`,
			`INSERT INTO email_events (type, bounce_class, provider, provider_event_id) VALUES ('complained', 'hard', 'ses', 'e1')`,
		},
		[]string{`INSERT INTO email_events (type, bounce_class, provider, provider_event_id) VALUES ('bounced', 'hard', 'ses', 'e1')`}},
	{"email_suppressions_source_check",
		[]string{`INSERT INTO email_suppressions (email, source) VALUES ('ada@example.com', 'bounce')`},
		[]string{`INSERT INTO email_suppressions (email, source) VALUES ('ada@example.com', 'soft_bounces')`}},
	{"email_suppressions_created_by_check",
		[]string{`UPDATE email_suppressions SET created_by = repeat('c', 201) WHERE email = 'fixture@example.com'`},
		[]string{`UPDATE email_suppressions SET created_by = repeat('c', 200) WHERE email = 'fixture@example.com'`}},
	{"email_suppressions_reason_size",
		[]string{`UPDATE email_suppressions SET reason = repeat('r', 1025) WHERE email = 'fixture@example.com'`},
		[]string{`UPDATE email_suppressions SET reason = repeat('r', 1024) WHERE email = 'fixture@example.com'`}},
	{"email_suppression_log_email_check",
		[]string{`INSERT INTO email_suppression_log (email, action) VALUES ('Ada@example.com', 'added')`, `INSERT INTO email_suppression_log (email, action) VALUES ('', 'added')`},
		[]string{`INSERT INTO email_suppression_log (email, action) VALUES ('ada@example.com', 'added')`}},
	{"email_suppression_log_action_check",
		[]string{`INSERT INTO email_suppression_log (email, action) VALUES ('ada@example.com', 'removed')`},
		[]string{`INSERT INTO email_suppression_log (email, action) VALUES ('ada@example.com', 'lifted')`}},
	{"email_suppression_log_reason_check",
		[]string{insLog(`, reason`, `, repeat('r', 1025)`)},
		[]string{insLog(`, reason`, `, repeat('r', 1024)`)}},
	{"email_suppression_log_actor_check",
		[]string{insLog(`, actor`, `, repeat('a', 201)`)},
		[]string{insLog(`, actor`, `, repeat('a', 200)`)}},

	// 00008: webhook controls.
	{"email_outbox_idempotency_key_format",
		[]string{
			`INSERT INTO email_outbox (payload, idempotency_key) VALUES ('{}', '')`,
			`INSERT INTO email_outbox (payload, idempotency_key) VALUES ('{}', repeat('k', 256))`,
		},
		[]string{`INSERT INTO email_outbox (payload, idempotency_key) VALUES ('{}', repeat('k', 255))`}},
	{"webhook_outbox_idempotency_key_format",
		[]string{
			`INSERT INTO webhook_outbox (event_type, payload, idempotency_key) VALUES ('a', '{}', '')`,
			`INSERT INTO webhook_outbox (event_type, payload, idempotency_key) VALUES ('a', '{}', repeat('k', 256))`,
		},
		[]string{`INSERT INTO webhook_outbox (event_type, payload, idempotency_key) VALUES ('a', '{}', repeat('k', 255))`}},
	{"webhook_endpoints_rate_limit_check",
		[]string{setEndpoint(`rate_limit = 0`), setEndpoint(`rate_limit = 10000.5`)},
		[]string{setEndpoint(`rate_limit = 0.001`), setEndpoint(`rate_limit = 10000`), setEndpoint(`rate_limit = NULL`)}},
	{"webhook_endpoints_max_in_flight_check",
		[]string{setEndpoint(`max_in_flight = 0`), setEndpoint(`max_in_flight = 10001`)},
		[]string{setEndpoint(`max_in_flight = 1`), setEndpoint(`max_in_flight = 10000`), setEndpoint(`max_in_flight = NULL`)}},
	{"webhook_endpoints_rl_tokens_check",
		[]string{setEndpoint(`rl_tokens = -0.5`)},
		[]string{setEndpoint(`rl_tokens = 0`)}},
	{"webhook_endpoints_consecutive_failures_check",
		[]string{setEndpoint(`consecutive_failures = -1`)},
		[]string{setEndpoint(`consecutive_failures = 0`)}},
	{"webhook_endpoints_breaker_opens_check",
		[]string{setEndpoint(`breaker_opens = -1`)},
		[]string{setEndpoint(`breaker_opens = 0`)}},
	// 00021: the breaker's failure-rate window.
	{"webhook_endpoints_breaker_counts_check",
		[]string{
			setEndpoint(`breaker_failures = -1`),
			setEndpoint(`breaker_window_at = now(), breaker_requests = 2, breaker_failures = 3`),
			setEndpoint(`breaker_window_at = NULL, breaker_requests = 1`),
		},
		[]string{
			setEndpoint(`breaker_window_at = now(), breaker_requests = 3, breaker_failures = 3`),
			setEndpoint(`breaker_window_at = NULL, breaker_requests = 0, breaker_failures = 0`),
		}},
	// 00024: the breaker's slow start after it closes.
	{"webhook_endpoints_breaker_recovering_check",
		[]string{setEndpoint(`breaker_recovering = true, paused_until = now()`)},
		[]string{setEndpoint(`breaker_recovering = true, paused_until = NULL`), setEndpoint(`breaker_recovering = false, paused_until = now()`)}},
	// 00025: a new endpoint's leased births.
	{"webhook_endpoints_unproven_births_check",
		[]string{setEndpoint(`unproven_births = -1`)},
		[]string{setEndpoint(`unproven_births = 0`)}},
	{"webhook_endpoint_secrets_secret_check",
		[]string{`INSERT INTO webhook_endpoint_secrets (endpoint_id, secret, expires_at) VALUES (` + fxEndpoint + `, 'whsecXc2Vjb25k', now())`},
		[]string{`INSERT INTO webhook_endpoint_secrets (endpoint_id, secret, expires_at) VALUES (` + fxEndpoint + `, 'whsec_c2Vjb25k', now())`}},

	// 00009: email attempts. Attempt 0 is a Mark of a row never claimed.
	{"email_attempts_attempt_check",
		[]string{`INSERT INTO email_attempts (row_id, attempt, outcome) VALUES (` + fxEmail + `, -1, 'sent')`},
		[]string{`INSERT INTO email_attempts (row_id, attempt, outcome) VALUES (` + fxEmail + `, 0, 'sent')`}},
	{"email_attempts_outcome_check",
		[]string{`INSERT INTO email_attempts (row_id, attempt, outcome) VALUES (` + fxEmail + `, 1, 'dispatched')`},
		[]string{`INSERT INTO email_attempts (row_id, attempt, outcome) VALUES (` + fxEmail + `, 1, 'retry')`}},
	{"email_attempts_error_check",
		[]string{`INSERT INTO email_attempts (row_id, attempt, outcome, error) VALUES (` + fxEmail + `, 1, 'failed', repeat('e', 2001))`},
		[]string{`INSERT INTO email_attempts (row_id, attempt, outcome, error) VALUES (` + fxEmail + `, 1, 'failed', repeat('e', 2000))`}},

	// 00012: the requeue log.
	{"email_outbox_prior_attempts_check",
		[]string{`UPDATE email_outbox SET prior_attempts = -1 WHERE id = ` + fxEmail},
		[]string{`UPDATE email_outbox SET prior_attempts = 0 WHERE id = ` + fxEmail}},
	{"email_outbox_throttles_check",
		[]string{`UPDATE email_outbox SET throttles = -1 WHERE id = ` + fxEmail},
		[]string{`UPDATE email_outbox SET throttles = 0 WHERE id = ` + fxEmail}},
	{"postbox_rate_buckets_tokens_check",
		[]string{`UPDATE postbox_rate_buckets SET tokens = -0.5 WHERE name = 'email'`},
		[]string{`UPDATE postbox_rate_buckets SET tokens = 0 WHERE name = 'email'`}},
	{"postbox_rate_buckets_name_check",
		[]string{`INSERT INTO postbox_rate_buckets (name) VALUES ('')`},
		[]string{`INSERT INTO postbox_rate_buckets (name) VALUES ('webhook')`}},
	{"email_requeues_from_status_check",
		[]string{insRequeue(`'pending', 0, 'ops'`)},
		[]string{insRequeue(`'skipped', 0, 'ops'`)}},
	{"email_requeues_attempt_check",
		[]string{insRequeue(`'failed', -1, 'ops'`)},
		[]string{insRequeue(`'failed', 0, 'ops'`)}},
	// Every requeue names who did it.
	{"email_requeues_actor_check",
		[]string{insRequeue(`'failed', 0, ''`), insRequeue(`'failed', 0, repeat('a', 201)`)},
		[]string{insRequeue(`'failed', 0, repeat('a', 200)`)}},

	// 00013, 00017: the keys a scrub removed, plain key names (the six
	// and those declared in email_secret_keys); NULL is "not known".
	{"email_outbox_scrubbed_keys_format",
		[]string{
			`UPDATE email_outbox SET scrubbed_keys = ARRAY['pdf', 'Api_key'] WHERE id = ` + fxEmail,
			`UPDATE email_outbox SET scrubbed_keys = ARRAY['pdf', ''] WHERE id = ` + fxEmail,
			`UPDATE email_outbox SET scrubbed_keys = ARRAY['a,b'] WHERE id = ` + fxEmail,
			`UPDATE email_outbox SET scrubbed_keys = ARRAY['pdf', NULL] WHERE id = ` + fxEmail,
			`UPDATE email_outbox SET scrubbed_keys = ARRAY['pdf,'] WHERE id = ` + fxEmail,
			`UPDATE email_outbox SET scrubbed_keys = ARRAY[NULL]::text[] WHERE id = ` + fxEmail,
		},
		[]string{
			`UPDATE email_outbox SET scrubbed_keys = ARRAY['setup_url', 'update_url', 'password_reset_url', 'invite_url', 'public_token', 'pdf', 'magic_link'] WHERE id = ` + fxEmail,
			`UPDATE email_outbox SET scrubbed_keys = ARRAY['k' || repeat('x', 63)] WHERE id = ` + fxEmail,
			`UPDATE email_outbox SET scrubbed_keys = '{}' WHERE id = ` + fxEmail,
			`UPDATE email_outbox SET scrubbed_keys = NULL WHERE id = ` + fxEmail,
		}},
	// 00017: a declared secret key is a plain identifier and not a field
	// of outbox.Payload.
	{"email_secret_keys_key_format",
		[]string{
			`INSERT INTO email_secret_keys (key) VALUES ('Magic_link')`,
			`INSERT INTO email_secret_keys (key) VALUES ('1link')`,
			`INSERT INTO email_secret_keys (key) VALUES ('to')`,
			`INSERT INTO email_secret_keys (key) VALUES ('invite_url')`,
			`INSERT INTO email_secret_keys (key) VALUES ('k' || repeat('x', 64))`,
		},
		[]string{
			`INSERT INTO email_secret_keys (key) VALUES ('magic_link')`,
			`INSERT INTO email_secret_keys (key) VALUES ('k' || repeat('x', 63))`,
		}},
	// 00033: a row's priority, and a kind's, is from 1 to 9; a kind's
	// name is a kind's.
	{"email_outbox_priority_range",
		[]string{
			`INSERT INTO email_outbox (payload, priority) VALUES ('{}', 0)`,
			`INSERT INTO email_outbox (payload, priority) VALUES ('{}', 10)`,
			`INSERT INTO email_outbox (payload, priority) VALUES ('{}', -1)`,
		},
		[]string{
			`INSERT INTO email_outbox (payload, priority) VALUES ('{}', 1)`,
			`INSERT INTO email_outbox (payload, priority) VALUES ('{}', 9)`,
			`INSERT INTO email_outbox (payload) VALUES ('{}')`,
		}},
	{"email_kind_priorities_priority_range",
		[]string{
			`INSERT INTO email_kind_priorities (kind, priority) VALUES ('digest', 0)`,
			`INSERT INTO email_kind_priorities (kind, priority) VALUES ('digest', 10)`,
		},
		[]string{
			`INSERT INTO email_kind_priorities (kind, priority) VALUES ('digest', 1)`,
			`INSERT INTO email_kind_priorities (kind, priority) VALUES ('weekly', 9)`,
		}},
	{"email_kind_priorities_kind_format",
		[]string{
			`INSERT INTO email_kind_priorities (kind, priority) VALUES ('Digest', 5)`,
			`INSERT INTO email_kind_priorities (kind, priority) VALUES ('1digest', 5)`,
			`INSERT INTO email_kind_priorities (kind, priority) VALUES ('d' || repeat('x', 64), 5)`,
		},
		[]string{
			`INSERT INTO email_kind_priorities (kind, priority) VALUES ('receipt_2', 5)`,
			`INSERT INTO email_kind_priorities (kind, priority) VALUES ('d' || repeat('x', 63), 5)`,
		}},
	// 00018: what retention dropped is recorded under a history's name.
	{"postbox_history_dropped_history_check",
		[]string{
			`INSERT INTO postbox_history_dropped (history, dropped_before, retention) VALUES ('email_outbox', now(), '90 days')`,
			`INSERT INTO postbox_history_dropped (history, dropped_before, retention) VALUES ('', now(), '90 days')`,
		},
		[]string{
			`INSERT INTO postbox_history_dropped (history, dropped_before, retention) VALUES ('email_attempts', now(), '90 days')`,
			`INSERT INTO postbox_history_dropped (history, dropped_before, retention) VALUES ('webhook_events', now(), '90 days')`,
		}},

	// 00023: an ordering key is 1..255 bytes, or NULL for none; a
	// delivery has a place exactly when it has a key, and only a keyed
	// one can be skipped; the failure policy is one of two.
	{"webhook_outbox_ordering_key_format",
		[]string{
			`UPDATE webhook_outbox SET ordering_key = '' WHERE id = ` + fxOutbox,
			`UPDATE webhook_outbox SET ordering_key = repeat('k', 256) WHERE id = ` + fxOutbox,
		},
		[]string{
			`UPDATE webhook_outbox SET ordering_key = repeat('k', 255) WHERE id = ` + fxOutbox,
			`UPDATE webhook_outbox SET ordering_key = 'k' WHERE id = ` + fxOutbox,
			`UPDATE webhook_outbox SET ordering_key = NULL WHERE id = ` + fxOutbox,
		}},
	// 00030: a tenant is 1..255 bytes without control characters (C0,
	// DEL, C1), or NULL for none — on an endpoint (set when it is made:
	// a new one, since its tenant is then fixed) and on an event alike.
	{"webhook_outbox_tenant_id_format",
		[]string{
			`UPDATE webhook_outbox SET tenant_id = '' WHERE id = ` + fxOutbox,
			`UPDATE webhook_outbox SET tenant_id = repeat('t', 256) WHERE id = ` + fxOutbox,
			`UPDATE webhook_outbox SET tenant_id = 'ac' || chr(10) || 'me' WHERE id = ` + fxOutbox,
			`UPDATE webhook_outbox SET tenant_id = 'acme' || chr(127) WHERE id = ` + fxOutbox,
			`UPDATE webhook_outbox SET tenant_id = 'acme' || chr(133) WHERE id = ` + fxOutbox,
		},
		[]string{
			`UPDATE webhook_outbox SET tenant_id = repeat('t', 255) WHERE id = ` + fxOutbox,
			`UPDATE webhook_outbox SET tenant_id = 'Acme GmbH / Zürich' WHERE id = ` + fxOutbox,
			`UPDATE webhook_outbox SET tenant_id = NULL WHERE id = ` + fxOutbox,
		}},
	{"webhook_endpoints_tenant_id_format",
		[]string{
			tenantEndpoint(`''`),
			tenantEndpoint(`repeat('é', 128)`),
			tenantEndpoint(`'acme' || chr(9)`),
		},
		[]string{
			tenantEndpoint(`repeat('t', 255)`),
			tenantEndpoint(`'cus_123'`),
			tenantEndpoint(`NULL`),
		}},
	// 00031: a catalog type is named as an outbox row's event_type is; its
	// description is at most 4 KiB; its schema an object or a boolean and
	// its example a document, each at most 256 KiB.
	{"webhook_event_types_name_format",
		[]string{
			`INSERT INTO webhook_event_types (name) VALUES ('')`,
			`INSERT INTO webhook_event_types (name) VALUES ('invoice paid')`,
			`INSERT INTO webhook_event_types (name) VALUES (repeat('t', 201))`,
		},
		[]string{
			`INSERT INTO webhook_event_types (name) VALUES ('invoice.paid') ON CONFLICT DO NOTHING`,
			`INSERT INTO webhook_event_types (name) VALUES (repeat('t', 200)) ON CONFLICT DO NOTHING`,
		}},
	{"webhook_endpoints_description_size",
		[]string{`UPDATE webhook_endpoints SET description = repeat('d', 4097) WHERE id = ` + fxEndpoint},
		[]string{`UPDATE webhook_endpoints SET description = repeat('é', 2048) WHERE id = ` + fxEndpoint}},
	{"webhook_event_types_description_size",
		[]string{`INSERT INTO webhook_event_types (name, description) VALUES ('a.long', repeat('d', 4097))`},
		[]string{`INSERT INTO webhook_event_types (name, description) VALUES ('a.long', repeat('d', 4096)) ON CONFLICT DO NOTHING`}},
	{"webhook_event_types_schema_shape",
		[]string{
			`INSERT INTO webhook_event_types (name, schema) VALUES ('a.schema', '[]')`,
			`INSERT INTO webhook_event_types (name, schema) VALUES ('a.schema', '"string"')`,
			`INSERT INTO webhook_event_types (name, schema) VALUES ('a.schema', jsonb_build_object('description', repeat('d', 262144)))`,
		},
		[]string{
			`INSERT INTO webhook_event_types (name, schema) VALUES ('a.object', '{"type": "object"}') ON CONFLICT DO NOTHING`,
			`INSERT INTO webhook_event_types (name, schema) VALUES ('a.boolean', 'true') ON CONFLICT DO NOTHING`,
		}},
	{"webhook_event_types_example_size",
		[]string{`INSERT INTO webhook_event_types (name, example) VALUES ('a.example', jsonb_build_object('d', repeat('d', 262144)))`},
		[]string{`INSERT INTO webhook_event_types (name, example) VALUES ('a.example', '{"id": "in_1"}') ON CONFLICT DO NOTHING`}},
	{"webhook_deliveries_ordering_check",
		[]string{
			`UPDATE webhook_deliveries SET ordering_key = 'k', ordering_seq = NULL WHERE id = ` + fxDelivery,
			`UPDATE webhook_deliveries SET ordering_key = NULL, ordering_seq = 7 WHERE id = ` + fxDelivery,
			`UPDATE webhook_deliveries SET ordering_key = NULL, ordering_seq = NULL, order_skipped_at = now() WHERE id = ` + fxDelivery,
		},
		[]string{
			`UPDATE webhook_deliveries SET ordering_key = 'k', ordering_seq = 7 WHERE id = ` + fxDelivery,
			`UPDATE webhook_deliveries SET ordering_key = 'k', ordering_seq = 7, order_skipped_at = now() WHERE id = ` + fxDelivery,
			`UPDATE webhook_deliveries SET ordering_key = NULL, ordering_seq = NULL, order_skipped_at = NULL WHERE id = ` + fxDelivery,
		}},
	{"webhook_endpoints_order_on_failure_check",
		[]string{setEndpoint(`order_on_failure = 'skip'`), setEndpoint(`order_on_failure = ''`)},
		[]string{setEndpoint(`order_on_failure = 'block'`), setEndpoint(`order_on_failure = 'proceed'`)}},

	// 00026: due times are finite; a delivery's may be NULL (the legacy
	// branch).
	{"email_outbox_next_attempt_at_finite",
		[]string{
			`INSERT INTO email_outbox (payload, next_attempt_at) VALUES ('{}', '-infinity')`,
			`UPDATE email_outbox SET next_attempt_at = 'infinity' WHERE id = ` + fxEmail,
		},
		[]string{`UPDATE email_outbox SET next_attempt_at = '9999-12-31 23:59:59+00' WHERE id = ` + fxEmail}},
	{"webhook_outbox_next_attempt_at_finite",
		[]string{
			`INSERT INTO webhook_outbox (event_type, payload, next_attempt_at) VALUES ('a', '{}', 'infinity')`,
			`UPDATE webhook_outbox SET next_attempt_at = '-infinity' WHERE id = ` + fxOutbox,
		},
		[]string{`UPDATE webhook_outbox SET next_attempt_at = '0001-01-01 00:00:00+00' WHERE id = ` + fxOutbox}},
	{"webhook_deliveries_next_retry_at_finite",
		[]string{
			`UPDATE webhook_deliveries SET next_retry_at = 'infinity' WHERE id = ` + fxDelivery,
			`UPDATE webhook_deliveries SET next_retry_at = '-infinity' WHERE id = ` + fxDelivery,
		},
		[]string{
			`UPDATE webhook_deliveries SET next_retry_at = now() WHERE id = ` + fxDelivery,
			`UPDATE webhook_deliveries SET next_retry_at = NULL WHERE id = ` + fxDelivery,
		}},

	// 00014: a row's trace, the W3C traceparent of version 00 in lowercase
	// hex, or NULL for none.
	traceparentCase("email_outbox_traceparent_format", `UPDATE email_outbox SET traceparent = %s WHERE id = `+fxEmail),
	traceparentCase("webhook_outbox_traceparent_format", `UPDATE webhook_outbox SET traceparent = %s WHERE id = `+fxOutbox),
	traceparentCase("webhook_events_traceparent_format",
		`UPDATE webhook_events SET traceparent = %s WHERE id = (SELECT event_id FROM webhook_deliveries WHERE id = `+fxDelivery+`)`),
}

// traceparentCase is one traceparent column's CHECK, through update (a
// format taking the value).
func traceparentCase(constraint, update string) checkCase {
	return checkCase{constraint,
		[]string{
			fmt.Sprintf(update, `'00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01'`), // upper case
			fmt.Sprintf(update, `'01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'`), // another version
			fmt.Sprintf(update, `'00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x'`),
			fmt.Sprintf(update, `''`),
		},
		[]string{
			fmt.Sprintf(update, `'00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'`),
			fmt.Sprintf(update, `NULL`),
		}}
}

// tenantEndpoint inserts a copy of the fixture endpoint of tenant (an SQL
// expression).
func tenantEndpoint(tenant string) string {
	return `INSERT INTO webhook_endpoints (tenant_id, url, secret) SELECT ` + tenant + `, url, secret FROM webhook_endpoints WHERE id = ` + fxEndpoint
}

// TestCheckConstraints_RefuseAndAccept pins every CHECK constraint of the
// schema in the migrations' own package: plain SQL in any language is held
// to the same rules as the Go API only by these, and until now they were
// exercised (some of them) only from the packages that write the rows. For
// each, statements that break it alone are refused with check_violation
// naming it, and statements at its edge are accepted. The schema's own
// catalog is the list, so a CHECK added without a case here fails too.
func TestCheckConstraints_RefuseAndAccept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)

	rows, err := pool.Query(ctx, `SELECT c.conname FROM pg_constraint c
		JOIN pg_class r ON r.oid = c.conrelid
		JOIN pg_namespace n ON n.oid = r.relnamespace
		WHERE c.contype = 'c' AND n.nspname = current_schema() AND r.relname NOT LIKE 'river%'
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	inSchema, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var inCases []string
	for _, c := range checkCases {
		inCases = append(inCases, c.constraint)
	}
	for _, name := range inSchema {
		if !slices.Contains(inCases, name) {
			t.Errorf("CHECK constraint %s has no case here", name)
		}
	}
	for _, name := range inCases {
		if !slices.Contains(inSchema, name) {
			t.Errorf("case %s names no CHECK constraint of the schema", name)
		}
	}

	for _, tc := range checkCases {
		t.Run(tc.constraint, func(t *testing.T) {
			t.Parallel()
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := tx.Exec(ctx, checkFixture); err != nil {
				t.Fatalf("fixture: %v", err)
			}
			for _, sql := range tc.bad {
				err := inSavepoint(ctx, tx, sql)
				var pgErr *pgconn.PgError
				switch {
				case err == nil:
					t.Errorf("accepted, want refused by %s:\n%s", tc.constraint, sql)
				case !errors.As(err, &pgErr) || pgErr.Code != "23514" || pgErr.ConstraintName != tc.constraint:
					t.Errorf("refused with %v (constraint %q), want check_violation 23514 of %s:\n%s",
						err, constraintOf(err), tc.constraint, sql)
				}
			}
			for _, sql := range tc.good {
				if err := inSavepoint(ctx, tx, sql); err != nil {
					t.Errorf("refused (%v), want accepted:\n%s", err, sql)
				}
			}
		})
	}
}

// inSavepoint runs sql in a savepoint of tx and keeps its effect only if it
// succeeded, so a refused statement leaves tx usable for the next.
func inSavepoint(ctx context.Context, tx pgx.Tx, sql string) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := sp.Exec(ctx, sql); err != nil {
		_ = sp.Rollback(ctx)
		return err
	}
	return sp.Commit(ctx)
}

func constraintOf(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.ConstraintName
	}
	return ""
}
