package story

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/postbox/postbox/internal/operator/portalaudit"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/webhook"
)

// WriteText prints the story for a terminal: `worker show`.
func WriteText(w io.Writer, s Story) error {
	p := &printer{w: w}
	switch {
	case len(s.Emails) > 0:
		p.f("%s %q: %s\n", s.Kind, s.Query, Plural(len(s.Emails), "email"))
		for _, e := range s.Emails {
			p.email(e)
		}
	case s.Event != nil:
		p.event(*s.Event)
	case s.Delivery != nil:
		p.f("delivery %s of event %s (%s)%s\n", s.Delivery.ID, s.Delivery.EventID, s.Delivery.EventType, ofTenant(s.Delivery.Tenant))
		p.delivery(*s.Delivery, "  ")
		if s.DeliveryFix != "" {
			p.f("  fix: %s\n", s.DeliveryFix)
		}
	case s.Endpoint != nil:
		p.endpoint(*s.Endpoint)
		p.portalActions(s.PortalActions)
	case s.WebhookOutbox != nil:
		o := s.WebhookOutbox
		p.f("webhook_outbox row %s (%s)%s: %s, %s, created %s\n", o.ID, o.EventType, ofTenant(o.Tenant), o.Status, Plural(o.Attempts, "attempt"), ts(o.CreatedAt))
		if o.Status == "pending" {
			p.f("  %s %s\n", Due(o.Attempts, o.NextAttemptAt), ts(o.NextAttemptAt))
		}
		if o.LastError != "" {
			p.f("  last error: %s\n", o.LastError)
		}
		switch {
		case o.EventID != "":
			p.f("  fanned out as event %s: worker show %s\n", o.EventID, o.EventID)
		case o.Status == "failed":
			p.f("  fix: worker requeue webhook %s\n", o.ID)
		}
	}
	for _, note := range s.HistoryDropped {
		p.f("\nhistory: %s\n", note)
	}
	if len(s.Jobs) > 0 {
		p.f("\nRiver shift jobs that attempted these rows (kept 24 h; River UI: /riverui/jobs/<id>):\n")
		for _, j := range s.Jobs {
			done := ""
			if j.FinalizedAt != nil {
				done = ", finished " + ts(*j.FinalizedAt)
			}
			p.f("  job %d on %s (%s%s): %s row %s\n", j.ID, j.Queue, j.State, done, j.Outcome, j.RowID)
		}
	}
	return p.err
}

// ofTenant names a webhook row's tenant, "" for none.
func ofTenant(tenant string) string {
	if tenant == "" {
		return ""
	}
	return " of tenant " + tenant
}

type printer struct {
	w   io.Writer
	err error
}

func (p *printer) f(format string, a ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, a...)
	}
}

func (p *printer) email(e Email) {
	p.f("\nemail %s  %s  %s\n", e.ID, e.Kind, strings.ToUpper(e.Status))
	p.f("  to %s, subject %q\n", e.To, e.Subject)
	p.f("  customer %s", e.CustomerID)
	if e.InvoiceID != "" {
		p.f(", invoice %s", e.InvoiceID)
	}
	if e.Trigger != "" {
		p.f(", trigger %s", e.Trigger)
	}
	if e.AttemptNumber > 0 {
		p.f(", dunning attempt %d", e.AttemptNumber)
	}
	p.f("\n  created %s, %s", ts(e.CreatedAt), e.AttemptsSoFar())
	if e.Status == "pending" {
		// Only a pending row has a next attempt: a sent, skipped or failed
		// one keeps its last due time, which means nothing.
		p.f(", next attempt %s", ts(e.NextAttemptAt))
	}
	if e.DispatchedAt != nil {
		p.f(", dispatched %s", ts(*e.DispatchedAt))
	}
	if e.TraceID != "" {
		p.f(", trace %s", e.TraceID)
	}
	p.f("\n")
	if e.LastError != "" {
		p.f("  last error: %s\n", e.LastError)
	}
	supp := "not suppressed"
	if e.Suppressed {
		supp = "SUPPRESSED: " + orNone(e.SuppressionReason)
		if s := e.Suppression; s != nil {
			supp += " (" + string(s.Source)
			if s.SourceRow != "" {
				supp += ", from row " + s.SourceRow
			}
			if s.CreatedBy != "" {
				supp += ", by " + s.CreatedBy
			}
			supp += ", since " + ts(s.CreatedAt) + ")"
		}
	}
	p.f("  recipient: %s\n", supp)
	p.f("  attempts:\n")
	logged := 0
	for _, a := range e.AttemptLog {
		if a.Outcome == outbox.OutcomeRequeued {
			p.f("    requeued  %s  by %s, from %s; attempts count again from 1\n", ts(a.At), a.By, a.From)
			continue
		}
		line := fmt.Sprintf("    #%d  %s  %s", a.Attempt, ts(a.At), a.Outcome)
		if a.Error != "" {
			line += ": " + a.Error
		}
		p.f("%s\n", line)
		logged = max(logged, a.Attempt)
	}
	for n := logged + 1; n <= e.PriorAttempts+e.Attempts; n++ {
		p.f("    #%d  no outcome recorded: its worker stopped, or its lease ran out, before it marked the row (or the attempt predates the attempt log)\n", n)
	}
	if len(e.AttemptLog) == 0 && e.Attempts == 0 {
		p.f("    none yet\n")
	}
	if len(e.Events) == 0 {
		p.f("  delivery events: none reported\n")
	} else {
		p.f("  delivery events:\n")
		for _, ev := range e.Events {
			what := ev.Type
			if ev.BounceClass != "" {
				what += " (" + ev.BounceClass + ")"
			}
			p.f("    %s  %-18s via %s  %s\n", ts(ev.At), what, ev.Provider, ev.Detail)
		}
	}
	if len(e.Secrets) > 0 {
		parts := make([]string, len(e.Secrets))
		for i, s := range e.Secrets {
			parts[i] = s.Key + " " + s.State
		}
		p.f("  secret keys: %s\n", strings.Join(parts, ", "))
	} else {
		p.f("  secret keys: none held\n")
	}
	p.f("  outcome: %s\n  fix: %s\n", e.Outcome, e.Fix)
}

func (p *printer) event(e webhook.EventRecord) {
	deprecated := ""
	if e.Deprecated {
		deprecated = ", a deprecated type"
	}
	p.f("event %s (%s%s)%s, created %s", e.ID, e.EventType, deprecated, ofTenant(e.Tenant), ts(e.CreatedAt))
	if e.ReplayOf != "" {
		p.f(", a replay of %s", e.ReplayOf)
	}
	if e.OutboxID != "" {
		p.f(", from webhook_outbox row %s", e.OutboxID)
	}
	p.f("\n")
	if len(e.Deliveries) == 0 {
		p.f("  no deliveries: no enabled endpoint was subscribed, or the replay was interrupted (run it again)\n")
	}
	failed := false
	for _, d := range e.Deliveries {
		p.f("  → %s (endpoint %s)\n", webhook.RedactURL(d.EndpointURL), d.EndpointID)
		p.delivery(d, "    ")
		failed = failed || d.Status == webhook.StatusFailed
	}
	if len(e.Replays) > 0 {
		p.f("  replays in this family:\n")
		for _, r := range e.Replays {
			what := "replay"
			if r.ReplayOf == "" {
				what = "original"
			}
			var states []string
			for _, d := range r.Deliveries {
				states = append(states, string(d.Status))
			}
			p.f("    %s %s, created %s: %d deliveries %v\n", what, r.ID, ts(r.CreatedAt), len(r.Deliveries), states)
		}
	}
	if failed {
		p.f("  fix: worker replay event %s\n", e.ID)
	}
}

func (p *printer) delivery(d webhook.DeliveryRecord, indent string) {
	p.f("%sdelivery %s: %s, %s", indent, d.ID, strings.ToUpper(string(d.Status)), Plural(d.Attempts, "attempt"))
	if d.DeliveredAt != nil {
		p.f(", delivered %s", ts(*d.DeliveredAt))
	}
	if d.Status == webhook.StatusPending && d.NextRetryAt != nil {
		p.f(", next try %s", ts(*d.NextRetryAt))
	}
	p.f("\n")
	if d.OrderingKey != "" {
		p.f("%s%s\n", indent, OrderingLine(d))
	}
	if d.LastError != "" {
		p.f("%slast error: %s\n", indent, d.LastError)
	}
	if len(d.Log) == 0 {
		return
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s  #\tAT\tSTATUS\tDURATION\tRESPONSE / ERROR\n", indent)
	for _, a := range d.Log {
		code := "-"
		if a.StatusCode != 0 {
			code = fmt.Sprint(a.StatusCode)
		}
		text := a.Excerpt
		if a.Error != "" {
			text = a.Error
		}
		fmt.Fprintf(tw, "%s  %d\t%s\t%s\t%s\t%s\n", indent, a.Attempt, ts(a.At), code, a.Duration, oneLine(text, 100))
	}
	tw.Flush()
	p.f("%s", b.String())
}

func (p *printer) endpoint(h webhook.Health) {
	e := h.Endpoint
	state := "enabled"
	if !e.Enabled {
		state = "DISABLED: " + orNone(e.DisabledReason)
	}
	p.f("endpoint %s %s%s\n  %s; event types %v; secret: present (never shown)\n", e.ID, webhook.RedactURL(e.URL), ofTenant(e.Tenant), state, e.EventTypes)
	for _, w := range h.Windows {
		if w.Attempts == 0 {
			p.f("  %s: no attempts\n", w.Name)
			continue
		}
		p.f("  %s: %d attempts, %.1f%% succeeded, p50 %s, p99 %s\n", w.Name, w.Attempts, 100*w.SuccessRate(), w.P50, w.P99)
	}
	b := e.Breaker
	p.f("  circuit breaker: %s", b.State)
	if b.PausedUntil != nil && b.State != "closed" {
		p.f(", paused until %s", ts(*b.PausedUntil))
	}
	if n := BreakerCount(&h); n != "" {
		p.f(" (%s)", n)
	}
	p.f("\n  rate limit: %s; in flight at most: %s\n", limit(e.RateLimit, "/s", "none"), limit(e.MaxInFlight, "", "no cap"))
	if h.ConsecutiveFailures > 0 {
		p.f("  failures since the last success: %d\n", h.ConsecutiveFailures)
	}
	if h.LastError != "" {
		p.f("  last error (%s): %s\n", ts(*h.LastErrorAt), h.LastError)
	}
	if h.LastSuccessAt != nil {
		p.f("  last success: %s\n", ts(*h.LastSuccessAt))
	}
	if !e.Enabled {
		p.f("  fix: worker endpoints enable %s, then worker replay endpoint %s --since <when it broke>\n", e.ID, e.ID)
	}
}

// portalActions lists what the tenant did in its portal.
func (p *printer) portalActions(es []portalaudit.Entry) {
	if len(es) == 0 {
		return
	}
	p.f("  in the tenant portal (newest first):\n")
	for _, e := range es {
		p.f("    %s  %s by tenant %s, session %s\n", ts(e.At), e.Action, e.Tenant, e.Session)
	}
}

// BreakerCount is what the breaker's own count adds to the attempt log's
// failures since the last success, or "" when it adds nothing. The two
// differ when the count was reset without a success — an operator enabled
// the endpoint — or when failures made no request and fed no breaker; the
// log's figure is then shown alone and would read as a contradiction.
func BreakerCount(h *webhook.Health) string {
	n := h.Endpoint.Breaker.ConsecutiveFailures
	if n == 0 || n == h.ConsecutiveFailures {
		return ""
	}
	return Plural(n, "failure") + " counted since the breaker was last reset"
}

func ts(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// oneLine folds text onto one line, at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// limit prints an optional limit.
func limit[T int | float64](v *T, unit, none string) string {
	if v == nil {
		return none
	}
	return fmt.Sprint(*v) + unit
}
