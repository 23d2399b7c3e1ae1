// Package httpapi is postbox's HTTP API, under /api/v1/ on `worker run`'s
// server, for services that cannot write to the application's database:
// JSON in and out, errors as RFC 9457 problem documents naming the bad
// field, described by docs/openapi.yaml.
//
// Two kinds of caller:
//
//   - an application key (API_KEYS: names and SHA-256 hashes, never the
//     keys) enqueues emails and events, reads any row's story, mints
//     portal links and tenant tokens, and acts as any tenant under
//     /api/v1/tenants/{tenant}/;
//   - a tenant token (minted with an application key, signed with
//     PORTAL_SIGNING_KEY like a portal session) reaches that tenant's
//     endpoints, deliveries, attempts and replays under /api/v1/ — what
//     its portal can do, through the same webhook.TenantScope, nothing
//     more.
//
// An enqueue answers 202 with the row's id once the row has committed; an
// Idempotency-Key header makes a retried request return the same row.
// Bodies are capped, each key and each failing address paced.
package httpapi
