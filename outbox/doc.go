/*
Package outbox delivers transactional email out of the email_outbox table:
an invoice email is sent at least once, re-sent at most once per crash or
expired lease, and never re-sent because a rollback lost the record of its
delivery (see docs/design/outbox-transport.md, Redelivery semantics).

# Enqueue

An application writes the email in its own transaction, so the email exists
exactly when the business change that caused it commits:

	tx, _ := pool.Begin(ctx)
	defer tx.Rollback(ctx)
	// … the application's own writes …
	id, err := outbox.Enqueue(ctx, tx, outbox.Email{
		Kind:       outbox.KindRaw,
		CustomerID: "cus_123",
		Payload:    outbox.Payload{To: "ada@example.com", Subject: "Welcome", Text: "Hello!"},
	})
	if err != nil {
		return err // a *ValidationError names the field; nothing was written
	}
	return tx.Commit(ctx)

The table's insert trigger wakes the workers when the transaction commits
(at most one notifying transaction per 10 ms, and none waits for another),
so the email leaves within milliseconds; a [Dispatcher] run with
Config.Wake claims on that wake-up, and polls otherwise.

The table is also a contract for other languages: a plain
INSERT INTO email_outbox (kind, customer_id, payload) is sent the same way. A payload that cannot be decoded at send time fails at once, with the
decode error in last_error.

# Claim, send, mark

A [Dispatcher] works in batches. Each batch:

 1. is claimed, with up to BatchSize pending, due rows, in one short
    statement — FOR UPDATE SKIP LOCKED, attempts + 1, next_attempt_at =
    now() + ClaimLease(BatchSize) — that commits before anything is sent.
    The lease keeps every other worker off the rows; if this worker dies,
    the rows become due again when the lease expires. The claim is the only
    place attempts increases. [Dispatcher.Drain] claims for all its free
    batch slots in one such statement, each row still under the lease of
    one batch and each batch timed from the claim.
 2. sends each row outside any transaction under a per-row budget, split
    into the sub-budgets of package leases (suppression, render, dial and
    exchange, post-send report). A row is started only while a full
    PerRowBudget remains in the batch; rows that cannot start are released
    (made due again) at once instead of waiting out their lease.
 3. records each row's outcome, as soon as its send returns and before the
    batch's next row starts, with its own compare-and-set UPDATE … WHERE
    id = $1 AND status = 'pending', on a context detached from the batch
    (context.WithoutCancel plus leases.MarkTimeout). A send that happened is
    therefore always recorded, even if the batch context died a moment
    later; and a writer whose row was meanwhile resolved by someone else is
    dropped ([ErrStaleMark]), logged and counted, never applied. Marks of
    different batches that are ready at the same moment share a round trip
    and a commit (a group commit): nothing waits to fill a group, and a
    statement the server rejects sends each mark of its group again alone.

Outcomes: sent → dispatched; the renderer returned [ErrSkip] → skipped; a
permanent error (undecodable payload, suppressed recipient, SMTP 5xx, header
injection) → failed at once; anything else is transient → the row stays
pending and is retried on a 15-slot backoff of about 72 hours, then failed.
The marks that set dispatched or skipped also remove the payload's
secret-bearing keys (setup_url, update_url, password_reset_url, invite_url,
public_token, pdf) in the same UPDATE; pending and failed rows keep the whole
payload, so an operator's [Requeue] of a failed row sends the complete email.

# Delivery events and suppressions

What happens to an email after the relay took it comes back as events
([RecordEvent], fed by package mailevents' provider endpoints): delivered,
bounced (hard or soft), complained, deferred, one email_events row per
provider event id, correlated to its row by the X-Postbox-Row header or the
Message-ID's row id, else by the provider's message id, else kept as an
orphan. An event never changes the row's status; [Record].LastEvent and
[EventsFor] show it beside the transport state. Hard bounces, complaints,
the relay's own permanent refusal of the mailbox ([smtp.ErrBadMailbox]: 5.1.1
and similar) and [SuppressionPolicy].SoftBounceLimit soft bounces put the
recipient on email_suppressions with the reason and the row
([AddSuppression]; [LiftSuppression] takes it off, logged with who). The
dispatcher checks the list at the claim, and again just before each send
once its batch's view is older than [SuppressionMaxAge], so a suppression
added mid-batch stops the sends after it.

# Secrets at rest

With a [KeyRing] (from OUTBOX_ENCRYPTION_KEYS, see [KeyRingFromEnv]) those
six keys are kept encrypted while a row waits: an [Enqueuer] with Keys
stores each as an AES-256-GCM envelope bound to the row id and the field
name; the dispatcher ([Config].Keys) opens them just before rendering, and
its retry and failed marks seal the plaintext secrets of a plain-SQL row in
the same UPDATE, so a row that waits never waits in plaintext. A field no
key of the ring opens fails its row permanently. [Rekey] moves waiting rows
to the active key after a rotation. The other keys stay readable: the
timeline, the sent-emails panel and bounce correlation read them. See
docs/ENCRYPTION.md for the threat model and key handling.

Each sealed field is stored as an envelope in place of its value:

	"password_reset_url": {"enc":"v1","kid":"k2026","n":"<nonce>","ct":"<ciphertext+tag>"}
	"pdf":                {"enc":"v1","kid":"k2026","n":"<nonce>","ct":"<ciphertext+tag>","t":"bytes"}

A string field's envelope seals its JSON value; the PDF's seals its bytes
("t":"bytes"), so it is stored no larger than in plaintext and opened
without a second base64 pass. Three writers seal: Enqueue, the retry and
failed marks, and Rekey. The dispatched and skipped marks remove the six
keys, sealed or not.

# What this package does not do

It imports no River package: River (package jobs) only decides when
[Dispatcher.Drain] runs. It never deletes an email_outbox row: dispatched
rows are the delivery record that [ListByInvoice] reads.
*/
package outbox
