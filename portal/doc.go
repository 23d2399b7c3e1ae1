// Package portal opens the tenant portal to one of the application's
// customers: a page, served by `worker run` under /portal/, where the
// customer (a tenant: webhook.Event.Tenant, webhook.Endpoint.Tenant)
// manages its own webhook endpoints and nothing of anyone else's.
//
// The application mints a link on its server for the customer who is
// signed in to it (Link), and sends the browser there. The link is signed
// with PORTAL_SIGNING_KEY, valid for minutes, and exchanged once for a
// session cookie bound to that tenant; a used, expired or forged link opens
// nothing. See docs/OPERATIONS.md, The tenant portal.
package portal
