// Package console is the operator's web console: server-rendered pages
// (html/template, embedded, no JavaScript, working offline) over the read
// models of package story, and the few actions operators take — requeue a
// failed email or webhook_outbox row, replay an event, replay an
// endpoint's failures since a time, enable or disable an endpoint.
//
// The console has no authentication of its own: cmd/worker mounts it
// behind the same basic auth as River UI, refused in production without
// credentials. Every action is a POST carrying a CSRF token bound to a
// cookie and to the basic-auth user, reached through a confirmation page,
// and logged with that user. Secret payload fields are never rendered:
// pages say "sealed", "present" or "scrubbed".
package console
