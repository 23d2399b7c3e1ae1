/*
Package webhook delivers webhooks out of Postgres without losing an event and
without re-sending a delivered one: endpoints, the webhook_outbox drainer and
its atomic fan-out, first attempts in process, the retry worker, replay,
Standard Webhooks signing, and an HTTP client that refuses to reach internal
addresses. Its design is docs/design/outbox-transport.md, Atomic fan-out,
with the sections on detached marks, redelivery semantics, retry gating
and retention.

# Enqueue

An application writes an event into webhook_outbox inside its own
transaction, so the event exists if and only if that transaction commits:

	id, err := webhook.Enqueue(ctx, tx, "invoice.paid", []byte(`{"invoice_id":"in_1"}`))

The table's insert trigger wakes the workers when the transaction commits,
so the event is fanned out within milliseconds. Any language can enqueue
with plain SQL, and is woken the same way:

	INSERT INTO webhook_outbox (event_type, payload) VALUES ('invoice.paid', '{"invoice_id":"in_1"}');

# Fan-out

The webhook_outbox lane ([Dispatcher.Run] in a shift, [Dispatcher.Drain]
until idle) claims due outbox rows the way every outbox claims (FOR UPDATE
SKIP LOCKED from the claim window's edge, attempts+1) and fans them out in
the same statement: it marks each row dispatched (a compare-and-set on
status = 'pending'), creates its event, and creates a delivery for every
enabled endpoint subscribed to the event type. [Dispatcher.DispatchFromOutbox]
does the same for one row. Deliveries are born leased: attempts = 1 and
next_retry_at = now() + BirthLeaseWindow, never NULL. The birth lease is
the claim of the first attempt, which this process makes right after
commit, on the same per-process cap (WEBHOOK_CONCURRENCY) as every retry
and replay; the retry worker cannot take a delivery inside it. A crash at
any point leaves either nothing (the row is still pending, and the next
claim takes it) or everything (the event, its deliveries and the mark);
never an event without deliveries, never a second event for a row.

# Attempts

Each attempt POSTs the event's JSON body with Standard Webhooks headers:
webhook-id (the event id, stable across attempts so receivers can dedupe),
webhook-timestamp (fresh per attempt) and webhook-signature (v1, HMAC-SHA256
of id.timestamp.body under the endpoint's whsec_ secret). It is bounded by
DeliveryBudget and recorded as [Mark] records it: one attempt-log
row (status code, duration, error, at most 4 KiB of the response) and a
compare-and-set mark on status = 'pending', on a context detached from the
caller's, so a result already obtained is never lost and a stale writer is
dropped, never applied ([ErrStaleMark]). The marks of attempts that
finish together share one commit, and each counts its attempt toward the
endpoint's circuit breaker in the same statement.

	2xx                       succeeded
	410 Gone                  failed, and the endpoint is disabled (logged, reason stored)
	refused address           failed (permanent: see below)
	429/503 + Retry-After     retried after the header's wait, clamped to [1s, 1h]
	3xx (never followed), other statuses, network errors, timeouts
	                          retried on DefaultBackoff with jitter; failed once it is spent

# Receiving

A receiver gets a POST with Content-Type application/json, the configured
User-Agent, and the three Standard Webhooks headers; with send_traceparent
on, a W3C traceparent header too. The body is the JSON object

	{"type":"invoice.paid","timestamp":"2026-01-02T03:04:05.123456Z","data":{...}}

type is the event type, timestamp the event's creation time at fan-out
(RFC 3339 in UTC, as Go's time.Time encodes it: up to six fractional
digits, trailing zeros dropped), data the
enqueued payload as Postgres jsonb returns it (keys reordered, whitespace
normalised). The body bytes are the same on every attempt and on every
endpoint's copy; only webhook-timestamp and webhook-signature change. The
receiver checks them with [Verify] (or package webhook/receiver's, the
same function without this package's dependencies) on the raw body before
parsing it, and dedupes on webhook-id: the event id, the same on every
attempt and across a secret rotation (during which webhook-signature
carries one signature per
active secret, so either secret verifies). A replay is a new event with a
new webhook-id, linked to the original by replay_of. The fan-out gives
the event its webhook_outbox row's id, so the id [Enqueue] (or plain SQL's
INSERT … RETURNING id) returned is the webhook-id the receiver sees; events
fanned out before that rule kept ids of their own.

# Retries

The retry lane ([Dispatcher.RunRetries]) runs in retry passes: River
jobs that any replica works, one at a time behind a pool-wide gate that
each hands to the next without a gap ([Dispatcher.DrainRetries] is one
pass until nothing is due, for tests and one-off runs). It claims up to
RetryClaimBatch due pending deliveries at a time with lease
RetryClaimLease(n), including deliveries written before deliveries were
born leased, whose next_retry_at is NULL, and attempts each with a fresh
signature. It claims no more deliveries than it has free attempt slots, so
a claimed delivery never queues for one.

First attempts share the same slots ([Settings].Concurrency). One that could
not start while a whole DeliveryBudget still fits in its birth lease is not
started late: it is released to the retry lane, so an in-process attempt
and a retry never overlap.

# Endpoint controls

An endpoint may carry a rate limit and an in-flight cap (SetLimits), held
across every replica because the retry claim decides them in the database
(throttle.go): a token bucket on the endpoint row and a count of its leased
deliveries. Deliveries to a limited endpoint, or to one whose circuit
breaker tripped, are born held instead of leased, so their first attempt
takes the same admission. A throttled delivery waits without spending an
attempt, and the claim skips it rather than waiting on it.

The circuit breaker (breaker.go) pauses an endpoint's deliveries once
Settings.BreakerFailureRate percent of at least Settings.BreakerMinRequests
attempts in a Settings.BreakerWindow failed, for a cool-down that doubles
with each reopening; half-open, probes — deliveries attempted before go
first — test the endpoint, and Settings.BreakerProbes successes close it. An endpoint failing for Settings.DisableAfter is
disabled with a reason, and the endpoint.disabled notice to
Settings.OpsEndpointID (and Config.OnDisable) commits with the disable. A
disabled endpoint's deliveries are held, not failed: EnableEndpoint resumes
them.

# Operational events

With Settings.OpsEndpointID set, the application's own endpoint is told,
by events addressed to it, what became of its customers' endpoints and
deliveries (opsevents.go): endpoint.disabled (EndpointDisabled),
endpoint.recovered (EndpointRecovered) when a breaker closes, and
delivery.exhausted (DeliveryExhausted) when a delivery fails for good —
each with the tenant, the endpoint and the delivery, so the application
can tell its customer.

[RotateSecret] gives an endpoint a new secret and keeps the old one signing
until it expires: the webhook-signature header then carries one signature
per active secret, space-separated. [Enqueuer.EnqueueEvent] with an
IdempotencyKey enqueues at most once per key.

# SSRF guard

The delivery client checks every address it connects to, after DNS
resolution and immediately before connect, so a name that resolves to a
public address when checked and to 169.254.169.254 when dialled cannot slip
through. Loopback, private, link-local (cloud metadata included), CGNAT,
multicast, unspecified, IPv4-mapped IPv6, IPv6 unique-local and a few
reserved ranges are refused unless WEBHOOK_ALLOWED_CIDRS admits them; an
IPv4-mapped address (::ffff:127.0.0.1, which localhost can resolve to) is
admitted by the IPv4 CIDR it maps into. A refusal names the address and the
CIDR that would admit it, and fails the delivery for good. Redirects are
never followed and no proxy is used.

# Replay and pruning

[Dispatcher.ReplayEvent] and [Dispatcher.ReplayFailedSince] send events again as
clones linked by replay_of: the clone is committed first, then its
born-leased deliveries are created in one statement; an interrupted replay
leaves a visible clone without deliveries, and running it again completes it.
ReplayEvent sends the clone where the original went: an event addressed to
one endpoint (Event.EndpointID, kept on the event as
webhook_events.endpoint_id) to that endpoint only, any other to every
enabled endpoint now subscribed to its type; [ReplayTargets] lists them.
[Dispatcher.Prune] deletes dispatched webhook_outbox rows older than
Settings.OutboxRetention (default seven days); events, deliveries and attempts
are never pruned.

# Replays

[Dispatcher.ReplayEvent] sends an event again as a new event: a clone with
its own id (so receivers that dedupe on webhook-id accept it) and
replay_of naming the original. replay_of always names the original, never
a clone, so an event and its replays form one flat family. A replay runs
in two steps (see docs/design/outbox-transport.md, Atomic fan-out):

 1. the clone is committed on its own;
 2. its born-leased deliveries are created in one statement (one
    transaction), and their first attempts made in process.

A replay interrupted between the two leaves a clone with no deliveries.
That is visible —

	SELECT id, replay_of, created_at FROM webhook_events c
	WHERE replay_of IS NOT NULL
	  AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = c.id);

— and running the same replay again completes that clone instead of
making another.

# River

This package imports no River code. Package jobs wires it: each replica's
shift jobs call [Dispatcher.Run], the gated retry pass
[Dispatcher.RunRetries], the gated prune [Dispatcher.Prune]. A job only
triggers work; the claim leases and CAS marks here are what make two shifts
at once, a rescued and re-run shift, or a pass on a replica that just lost
leadership harmless. [Dispatcher.Stop] is the soft
stop: nothing more is claimed, attempts in flight finish and mark.
*/
package webhook
