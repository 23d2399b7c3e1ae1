// Package story answers the question operators are paged with — "what
// happened to invoice INV-1042's email?", "did customer cus_42 get the
// password reset?", "why is endpoint E failing?" — from one input: an
// email row id, an invoice id, a customer id, a recipient address, a
// webhook event, delivery, outbox row or endpoint id. Find detects which
// (Kind forces it) and assembles a Story from the read models of the
// packages that own the tables (outbox, webhook); `worker show` prints it
// and the console (internal/operator/console) renders it.
//
// A Story never carries a secret: email rows come from outbox.Record,
// whose payload has the secret keys removed and which says only whether
// each is sealed, present or scrubbed; endpoints are read without their
// signing secret.
package story
