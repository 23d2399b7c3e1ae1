package outbox

import (
	"fmt"
	"slices"
	"strings"
)

// scrubbedPayloadKeys are removed from a row's payload by the mark that sets
// it dispatched, skipped or cancelled, with the keys a template
// directory's kinds declare secret (DeclareSecretKeys), in the same UPDATE (see
// docs/design/outbox-transport.md, Scrub of secret keys). They are the
// single-use links, the public token and the PDF: what must not outlive the
// send. Every other key stays, because the invoice timeline, the sent-emails
// panel and provider webhooks read them (to, invoice_number, attempt_number,
// trigger, …).
//
// Pending rows keep all six until sent (seconds normally, up to the ~72 h
// backoff while retrying); failed rows keep them, so an operator's requeue
// sends the complete email. With a KeyRing they keep them sealed (see
// seal.go); the scrub removes them sealed or not. Rows marked before the
// scrub existed are not rewritten.
var scrubbedPayloadKeys = []string{
	"setup_url",
	"update_url",
	"password_reset_url",
	"invite_url",
	"public_token",
	"pdf",
}

// SecretPayloadKeys are the payload keys the dispatched mark scrubs (and a
// KeyRing seals while the row waits): what no log, page or error shows.
func SecretPayloadKeys() []string { return slices.Clone(scrubbedPayloadKeys) }

// scrubbedKeysSQL is every secret payload key as a SQL text[]:
// scrubbedPayloadKeys as a literal, then the keys declared in
// email_secret_keys (DeclareSecretKeys). The six are constants of this
// package (checked to be plain identifiers), not input, so building the
// literal once is as safe as a parameter and keeps the statements'
// parameters about the row. The declared keys are read by an uncorrelated
// subquery, which Postgres evaluates once per statement (an InitPlan), not
// once per row; the table holds a handful of rows.
var scrubbedKeysSQL = "(" + textArray(scrubbedPayloadKeys) + " || ARRAY(SELECT key FROM email_secret_keys))"

// scrubSet is the SET clause the dispatched and skipped marks share. It
// also records which of the keys the payload held (scrubbed_keys; both
// assignments read the row as it was), so the row's story names what was
// removed and no more.
//
// Only a payload holding one of the keys is rewritten: jsonb - text[]
// rebuilds (and the row then recompresses) the whole document even when no
// key matches.
var scrubSet = "payload = CASE WHEN payload ?| " + scrubbedKeysSQL + " THEN payload - " + scrubbedKeysSQL + " ELSE payload END, " +
	"scrubbed_keys = ARRAY(SELECT k FROM unnest(" + scrubbedKeysSQL + ") AS k WHERE payload ? k)"

func textArray(keys []string) string {
	quoted := make([]string, len(keys))
	for i, k := range keys {
		if k == "" || strings.Trim(k, "abcdefghijklmnopqrstuvwxyz_") != "" {
			panic(fmt.Sprintf("outbox: payload key %q is not a plain identifier", k))
		}
		quoted[i] = "'" + k + "'"
	}
	return "ARRAY[" + strings.Join(quoted, ", ") + "]::text[]"
}
