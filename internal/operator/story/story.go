package story

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/operator/portalaudit"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/webhook"
)

// Story is everything known about one input. Exactly the part its Kind
// names is set. The slices are the read model's extension points: a new
// table (email events, a suppression's history, a breaker's state) adds a
// field here and a loader in Find, and both printers show it.
type Story struct {
	Query string `json:"query"`
	Kind  Kind   `json:"kind"`

	// Emails are the rows of an email id (one), an invoice (all, newest
	// first), a customer or a recipient (the last 30 days).
	Emails []Email `json:"emails,omitempty"`

	Event    *webhook.EventRecord    `json:"event,omitempty"`
	Delivery *webhook.DeliveryRecord `json:"delivery,omitempty"`
	// DeliveryFix is what would fix a failed delivery: the change to make
	// first when retrying alone cannot help, and the command.
	DeliveryFix string          `json:"delivery_fix,omitempty"`
	Endpoint    *webhook.Health `json:"endpoint,omitempty"`
	// PortalActions are what the endpoint's tenant did to it in the
	// tenant portal, newest first (portal_audit).
	PortalActions []portalaudit.Entry   `json:"portal_actions,omitempty"`
	WebhookOutbox *webhook.OutboxRecord `json:"webhook_outbox,omitempty"`

	// Jobs are the River shift jobs still kept (24 h) whose output names
	// a row of this story.
	Jobs []JobRef `json:"jobs,omitempty"`

	// HistoryDropped says, a sentence each, what retention has dropped of
	// these rows' history (EMAIL_HISTORY_RETENTION,
	// WEBHOOK_HISTORY_RETENTION): the logs shown start after it.
	HistoryDropped []string `json:"history_dropped,omitempty"`
}

// portalActionsShown is how many of an endpoint's portal actions a story
// shows.
const portalActionsShown = 20

// Tenant is whose the story's webhook row is ("" for none), and whether
// it is a webhook row at all: an email has no tenant.
func (s Story) Tenant() (tenant string, webhook bool) {
	switch {
	case s.Event != nil:
		return s.Event.Tenant, true
	case s.Delivery != nil:
		return s.Delivery.Tenant, true
	case s.Endpoint != nil:
		return s.Endpoint.Endpoint.Tenant, true
	case s.WebhookOutbox != nil:
		return s.WebhookOutbox.Tenant, true
	}
	return "", false
}

// Email is one email_outbox row as an operator reads it.
type Email struct {
	ID            string     `json:"id"`
	Kind          string     `json:"kind"`
	CustomerID    string     `json:"customer_id"`
	InvoiceID     string     `json:"invoice_id,omitempty"`
	To            string     `json:"to"`
	Subject       string     `json:"subject"`
	Trigger       string     `json:"trigger,omitempty"`
	AttemptNumber int        `json:"attempt_number,omitempty"` // the dunning attempt, from the payload
	Status        string     `json:"status"`
	Attempts      int        `json:"attempts"` // since the last requeue: the retry budget's count
	NextAttemptAt time.Time  `json:"next_attempt_at"`
	LastError     string     `json:"last_error,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	DispatchedAt  *time.Time `json:"dispatched_at,omitempty"`
	// CancelledAt and CancelledBy say when and by whom a cancelled row
	// was withdrawn.
	CancelledAt *time.Time `json:"cancelled_at,omitempty"`
	CancelledBy string     `json:"cancelled_by,omitempty"`
	// PriorAttempts is the attempts made before the row's requeues; the
	// log numbers attempts over the row's life.
	PriorAttempts int `json:"prior_attempts,omitempty"`
	// TraceID is the trace the row was enqueued in, where its attempts'
	// spans are; "" when it was enqueued outside one.
	TraceID string `json:"trace_id,omitempty"`

	// Secrets is each secret payload key and its state (sealed, present,
	// scrubbed); never a value.
	Secrets []outbox.SecretField `json:"secrets"`

	Suppressed        bool   `json:"suppressed"`
	SuppressionReason string `json:"suppression_reason,omitempty"`
	// Suppression is the recipient's entry on the list: why, from which
	// row or event, by whom and when.
	Suppression *outbox.Suppression `json:"suppression,omitempty"`

	// Events are what the relay or provider reported after the send
	// (email_events), oldest first; LastEvent is the newest one's type.
	// They never change Status, the transport's state: a dispatched row
	// that bounced is dispatched, with LastEvent bounced.
	Events    []EmailEvent `json:"events"`
	LastEvent string       `json:"last_event,omitempty"`

	// Outcome says in a sentence where the row stands; Fix is the command
	// that would fix it, or why there is none.
	Outcome string `json:"outcome"`
	Fix     string `json:"fix"`
	// Requeueable: a failed row, which `worker requeue email` and the
	// console's requeue accept, unless it failed for its payload: a
	// requeue would fail it the same way, so the console offers none.
	Requeueable bool `json:"requeueable"`

	// AttemptLog is each recorded attempt's time and outcome (its error,
	// for a retry or a failure), and each requeue (who, from which state),
	// oldest first. Attempts above the last logged number never marked: the
	// worker died, or its lease ran out, first. Story.Jobs lists the shifts of the last 24 h that attempted
	// the row; Events what came back after the send.
	AttemptLog []outbox.Attempt `json:"attempt_log"`
}

// EmailEvent is one delivery event as an operator reads it. The raw
// excerpt stays in the table: a provider's payload can quote the message.
type EmailEvent struct {
	Type        string    `json:"type"`
	BounceClass string    `json:"bounce_class,omitempty"`
	Provider    string    `json:"provider"`
	Detail      string    `json:"detail,omitempty"`
	At          time.Time `json:"at"` // when the provider says it happened, else when it arrived
}

// JobRef is a River job that touched a row.
type JobRef struct {
	ID          int64      `json:"id"`
	Queue       string     `json:"queue"`
	State       string     `json:"state"`
	FinalizedAt *time.Time `json:"finalized_at,omitempty"`
	RowID       string     `json:"row_id"`
	Outcome     string     `json:"outcome"` // "sent", or "failed" (failed or retried): the shift's lists
}

// Find detects what q names (or takes kind, when not "") and reads its
// story. Input that cannot name anything is ErrMalformed; input that names
// nothing stored is a *NotFoundError saying what was searched.
func Find(ctx context.Context, db claim.DB, q string, kind Kind) (Story, error) {
	q = strings.TrimSpace(q)
	if q == "" {
		return Story{}, fmt.Errorf("%w: nothing to look up: give an email, event, delivery or endpoint id, an invoice id, a customer id or an address", ErrMalformed)
	}
	// Postgres refuses such text as a parameter (SQLSTATE 22021), so no row
	// can match it: it is the caller's mistake, not a failed lookup.
	if !utf8.ValidString(q) || strings.ContainsRune(q, 0) {
		return Story{}, fmt.Errorf("%w: %q is not text that can name anything (invalid UTF-8 or a NUL byte)", ErrMalformed, q)
	}
	kinds := []Kind{kind}
	if kind == "" {
		var err error
		if kinds, err = detect(q); err != nil {
			return Story{}, err
		}
	} else if err := checkForced(q, kind); err != nil {
		return Story{}, err
	}
	for _, k := range kinds {
		s, found, err := load(ctx, db, q, k)
		if err != nil {
			return Story{}, err
		}
		if found {
			return s, nil
		}
	}
	note, err := deletedNote(ctx, db, kinds)
	if err != nil {
		return Story{}, err
	}
	return Story{}, &NotFoundError{Query: q, Searched: kinds, Deleted: note}
}

// load reads q as kind k; found is false when nothing matches.
func load(ctx context.Context, db claim.DB, q string, k Kind) (s Story, found bool, err error) {
	s = Story{Query: q, Kind: k}
	var recs []outbox.Record
	switch k {
	case KindEmail:
		var r outbox.Record
		r, err = outbox.Get(ctx, db, q)
		recs = []outbox.Record{r}
	case KindInvoice:
		recs, err = outbox.ListByInvoice(ctx, db, q)
	case KindCustomer:
		recs, err = outbox.ListByCustomer(ctx, db, q, outbox.MaxListLimit)
	case KindRecipient:
		recs, err = outbox.ListByRecipient(ctx, db, q, outbox.MaxListLimit)
		if errors.Is(err, outbox.ErrInvalid) {
			return s, false, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
	case KindEvent:
		var e webhook.EventRecord
		if e, err = webhook.GetEvent(ctx, db, q); err == nil {
			s.Event = &e
		}
	case KindDelivery:
		var d webhook.DeliveryRecord
		if d, err = webhook.GetDelivery(ctx, db, q); err == nil {
			s.Delivery = &d
			s.DeliveryFix = deliveryFix(d)
		}
	case KindEndpoint:
		var h webhook.Health
		if h, err = webhook.EndpointHealth(ctx, db, q); err == nil {
			s.Endpoint = &h
			s.PortalActions, err = portalaudit.OfTarget(ctx, db, q, portalActionsShown)
		}
	case KindWebhookOutbox:
		var o webhook.OutboxRecord
		if o, err = webhook.GetOutbox(ctx, db, q); err == nil {
			s.WebhookOutbox = &o
		}
	default:
		return s, false, fmt.Errorf("%w: unknown kind %q", ErrMalformed, k)
	}
	switch {
	case errors.Is(err, outbox.ErrNotFound), errors.Is(err, webhook.ErrNotFound):
		return s, false, nil
	case err != nil:
		return s, false, err
	}
	if recs != nil || k == KindInvoice || k == KindCustomer || k == KindRecipient {
		if len(recs) == 0 {
			return s, false, nil
		}
		if s.Emails, err = Emails(ctx, db, recs); err != nil {
			return s, false, err
		}
	}
	ids, since := s.rowIDs()
	if s.Jobs, err = jobsFor(ctx, db, ids, since); err != nil {
		return s, false, err
	}
	if s.HistoryDropped, err = droppedNotes(ctx, db, s); err != nil {
		return s, false, err
	}
	return s, true, nil
}

// maxJobLookupIDs caps the row ids whose shift jobs a story looks up:
// each id is a containment test on every kept shift's output.
const maxJobLookupIDs = 20

// rowIDs are the ids a shift's output could name — email rows, deliveries
// and webhook_outbox rows, newest first, at most maxJobLookupIDs — and
// the oldest row's creation: no shift finished before it touched them.
func (s Story) rowIDs() (ids []string, since time.Time) {
	add := func(id string, created time.Time) {
		if len(ids) >= maxJobLookupIDs {
			return
		}
		ids = append(ids, id)
		if since.IsZero() || created.Before(since) {
			since = created
		}
	}
	for _, e := range s.Emails {
		add(e.ID, e.CreatedAt)
	}
	if s.Event != nil {
		for _, d := range s.Event.Deliveries {
			add(d.ID, d.CreatedAt)
		}
		if s.Event.OutboxID != "" {
			add(s.Event.OutboxID, s.Event.CreatedAt.Add(-time.Hour)) // the outbox row came first, by how much is unknown
		}
	}
	if s.Delivery != nil {
		add(s.Delivery.ID, s.Delivery.CreatedAt)
	}
	if s.WebhookOutbox != nil {
		add(s.WebhookOutbox.ID, s.WebhookOutbox.CreatedAt)
	}
	return ids, since
}

// Emails turns records into the operator's view of each: secret states,
// suppression, outcome and fix.
func Emails(ctx context.Context, db claim.DB, recs []outbox.Record) ([]Email, error) {
	out := make([]Email, 0, len(recs))
	type suppression struct {
		entry outbox.Suppression
		on    bool
	}
	supp := map[string]suppression{} // per address: one lookup
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	// Every row's attempt log and events in one query each, not two per row.
	logs, err := outbox.AttemptsForRows(ctx, db, ids)
	if err != nil {
		return nil, err
	}
	eventsByRow, err := outbox.EventsForRows(ctx, db, ids)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		e := Email{
			ID: r.ID, Kind: string(r.Kind), CustomerID: r.CustomerID, InvoiceID: r.InvoiceID, To: r.To, Subject: r.Subject,
			Trigger: r.Trigger, AttemptNumber: r.AttemptNumber, Status: string(r.Status), Attempts: r.Attempts, PriorAttempts: r.PriorAttempts,
			TraceID:       traceID(r.Traceparent),
			NextAttemptAt: r.NextAttemptAt, LastError: r.LastError, CreatedAt: r.CreatedAt, DispatchedAt: r.DispatchedAt,
			CancelledAt: r.CancelledAt, CancelledBy: r.CancelledBy,
			Secrets: r.SecretFields(), Requeueable: r.Status == outbox.StatusFailed && !outbox.FailedForPayload(r.LastError),
		}
		if e.Secrets == nil {
			e.Secrets = []outbox.SecretField{}
		}
		got, ok := supp[r.To]
		if !ok {
			entry, on, err := outbox.CheckSuppression(ctx, db, r.To)
			var invalid *outbox.ValidationError
			switch {
			case errors.As(err, &invalid):
				// An address that does not parse cannot be on the list.
			case err != nil:
				return nil, err
			}
			got = suppression{entry, on}
			supp[r.To] = got
		}
		if got.on {
			entry := got.entry
			e.Suppressed, e.SuppressionReason, e.Suppression = true, entry.Reason, &entry
		}
		e.AttemptLog = logs[r.ID]
		if e.AttemptLog == nil {
			e.AttemptLog = []outbox.Attempt{}
		}
		events := eventsByRow[r.ID]
		e.Events = make([]EmailEvent, 0, len(events))
		for _, ev := range events {
			at := ev.ReceivedAt
			if ev.OccurredAt != nil {
				at = *ev.OccurredAt
			}
			e.Events = append(e.Events, EmailEvent{Type: string(ev.Type), BounceClass: string(ev.BounceClass),
				Provider: ev.Provider, Detail: ev.Detail, At: at})
		}
		e.LastEvent = string(r.LastEvent)
		e.Outcome, e.Fix = verdict(e)
		out = append(out, e)
	}
	return out, nil
}

// AttemptsSoFar counts the row's attempts: "3 attempts", or, after a
// requeue, "1 attempt since its requeue, 17 in all".
func (e Email) AttemptsSoFar() string {
	if e.PriorAttempts == 0 {
		return Plural(e.Attempts, "attempt")
	}
	return Plural(e.Attempts, "attempt") + " since its requeue, " + strconv.Itoa(e.PriorAttempts+e.Attempts) + " in all"
}

// verdict is where an email stands and what would fix it.
func verdict(e Email) (outcome, fix string) {
	switch e.Status {
	case "dispatched":
		at := ""
		if e.DispatchedAt != nil {
			at = " at " + e.DispatchedAt.UTC().Format(time.RFC3339)
		}
		return "sent: the relay accepted it" + at + " after " + e.AttemptsSoFar(),
			"nothing to requeue. To send it again, send a new email: a sent row's links and PDF are gone (scrubbed)"
	case "skipped":
		return "skipped by its renderer: " + orNone(e.LastError),
			"send a new email: a skipped row's links and PDF are gone (scrubbed)"
	case "failed":
		fix = "worker requeue email " + e.ID
		if outbox.FailedForPayload(e.LastError) {
			fix = outbox.CorrectedRowFix
		}
		if e.Suppressed {
			fix = "the recipient is suppressed (" + orNone(e.SuppressionReason) + "): lift the suppression first, then " + fix
		}
		// The dispatcher's own give-up error already says how many.
		if strings.HasPrefix(e.LastError, "gave up after ") {
			return "failed for good: " + e.LastError, fix
		}
		return "failed for good after " + e.AttemptsSoFar() + ": " + orNone(e.LastError), fix
	case "cancelled":
		by := ""
		if e.CancelledAt != nil {
			by = " at " + e.CancelledAt.UTC().Format(time.RFC3339)
		}
		if e.CancelledBy != "" {
			by += " by " + e.CancelledBy
		}
		return "cancelled" + by + " before it was sent: it will not be sent", "send a new email if it is wanted after all: a cancelled row's links and PDF are gone (scrubbed)"
	case "pending":
		next := e.NextAttemptAt.UTC().Format(time.RFC3339)
		if Due(e.Attempts, e.NextAttemptAt) == dueScheduled {
			return "scheduled for " + next, "none needed: the workers send it then; worker cancel email " + e.ID + " withdraws it"
		}
		if e.Attempts == 0 {
			return "waiting for its first attempt (due " + next + ")", "none needed: the workers send it when due"
		}
		fix = "none needed: it is retried at " + next + "; if it keeps failing, fix the cause in last_error"
		if e.Suppressed {
			fix = "the recipient is suppressed (" + orNone(e.SuppressionReason) + "): its next attempt fails for good unless the suppression is lifted"
		}
		return e.AttemptsSoFar() + " so far, next at " + next + "; last error: " + orNone(e.LastError), fix
	}
	return "status " + e.Status, "none known"
}

const dueScheduled = "scheduled for"

// Due names a pending row's due time, for the story and the console: a row
// never attempted and due later is "scheduled for" — held by its send-at,
// not backing off (a retry has attempts; a requeue is due now) — and any
// other is its "next attempt".
func Due(attempts int, next time.Time) string {
	if attempts == 0 && next.After(time.Now()) {
		return dueScheduled
	}
	return "next attempt"
}

// Plural is "1 attempt", "2 attempts": the story's counts, and the
// console's.
func Plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func orNone(s string) string {
	if s == "" {
		return "none recorded"
	}
	return s
}

// ShiftKind is the River kind of a shift job (jobs.ShiftArgs), kept here
// because the jobs package's tests read stories.
const ShiftKind = "postbox_shift"

// shiftJobsKept bounds the shift jobs a story lists: the newest first.
const shiftJobsKept = 20

// jobLister reads River's jobs through River's own job list; a client
// with no pool is enough for a list in the caller's transaction.
var jobLister = sync.OnceValues(func() (*river.Client[pgx.Tx], error) {
	return river.NewClient(riverpgxv5.New(nil), &river.Config{})
})

// jobsFor finds the shift jobs River still keeps whose recorded output
// names one of ids, finished since the oldest row was created (since).
// River keeps finished jobs 24 h; a shift records at most the first 50 ids
// of each list, so an older or busier row may have none. The list is
// River's (JobListTx), narrowed in Postgres to the outputs that name an
// id (?|), then matched to the ids each names.
func jobsFor(ctx context.Context, db claim.DB, ids []string, since time.Time) ([]JobRef, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	client, err := jobLister()
	if err != nil {
		return nil, fmt.Errorf("story: shift jobs: %w", err)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("story: shift jobs: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	list, err := client.JobListTx(ctx, tx, river.NewJobListParams().
		Kinds(ShiftKind).
		States(rivertype.JobStateCompleted, rivertype.JobStateCancelled, rivertype.JobStateDiscarded).
		Where(`finalized_at >= @since AND (metadata->'output'->'sent_ids' ?| @ids::text[] OR metadata->'output'->'failed_ids' ?| @ids::text[])`,
			river.NamedArgs{"since": since, "ids": ids}).
		OrderBy(river.JobListOrderByID, river.SortOrderDesc).
		First(shiftJobsKept))
	if err != nil {
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "42P01" {
			return nil, nil // no river_job: the library used without River's migrations
		}
		return nil, fmt.Errorf("story: shift jobs: %w", err)
	}
	sorted := slices.Sorted(slices.Values(ids))
	var out []JobRef
	for _, j := range list.Jobs {
		var o struct {
			SentIDs   []string `json:"sent_ids"`
			FailedIDs []string `json:"failed_ids"`
		}
		if err := json.Unmarshal(j.Output(), &o); err != nil {
			return nil, fmt.Errorf("story: shift job %d: its output: %w", j.ID, err)
		}
		for _, id := range sorted {
			ref := JobRef{ID: j.ID, Queue: j.Queue, State: string(j.State), FinalizedAt: j.FinalizedAt, RowID: id}
			switch {
			case slices.Contains(o.SentIDs, id):
				ref.Outcome = "sent"
			case slices.Contains(o.FailedIDs, id):
				ref.Outcome = "failed"
			default:
				continue
			}
			out = append(out, ref)
		}
	}
	return out, nil
}

// deliveryFix is a failed delivery's fix: requeue it, which sends it again
// to its own endpoint under the same webhook-id (a replay would send a new
// event to every endpoint) — after changing the endpoint when the SSRF
// guard refused its address, since the same URL would be refused again.
func deliveryFix(d webhook.DeliveryRecord) string {
	if d.Status != webhook.StatusFailed {
		return ""
	}
	requeue := "worker requeue delivery " + d.ID
	if webhook.RefusedByAddressGuard(d.LastError) {
		return "the endpoint's URL resolves to an address the SSRF guard refuses: point the endpoint at a public address " +
			"(or admit its range with " + webhook.EnvAllowedCIDRs + "), then " + requeue
	}
	if d.OrderingKey != "" && d.Behind > 0 && !d.OrderSkipped {
		return requeue + "   (sent again, before the rest of its key), or let the key go on without it: worker ordering skip " + d.ID
	}
	return requeue + "   (sent again to its endpoint only, same webhook-id)"
}

// OrderingLine says where an ordered delivery stands in its key: what it
// waits for, or what waits for it.
func OrderingLine(d webhook.DeliveryRecord) string {
	line := "ordering key " + strconv.Quote(d.OrderingKey)
	switch {
	case d.WaitsFor != "":
		line += ": waits for the earlier delivery " + d.WaitsFor + " of its key to this endpoint"
	case d.Status == webhook.StatusFailed && d.OrderSkipped:
		line += ": skipped by an operator; the key went on without it"
	case d.Behind > 0 && d.Status == webhook.StatusFailed:
		line += fmt.Sprintf(": holds its key, %s waiting behind it (unless the endpoint's order_on_failure is proceed)", Plural(d.Behind, "delivery"))
	case d.Behind > 0:
		line += fmt.Sprintf(": first of its key, %s waiting behind it", Plural(d.Behind, "delivery"))
	}
	return line
}

// traceID is a traceparent's trace id (its second field), "" for none.
func traceID(traceparent string) string {
	if _, rest, ok := strings.Cut(traceparent, "-"); ok {
		id, _, _ := strings.Cut(rest, "-")
		return id
	}
	return ""
}
