package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/webhook"
)

var secretKeys = outbox.SecretPayloadKeys()

// PrintSummary reads the outcome back from the database, the sink and
// the receivers — the same places an operator would look — and prints it.
func (w *World) PrintSummary(ctx context.Context, out io.Writer, mix Mix) error {
	if err := summarizeEmail(ctx, out, w, mix); err != nil {
		return err
	}
	return summarizeWebhooks(ctx, out, w, mix)
}

func summarizeEmail(ctx context.Context, out io.Writer, w *World, mix Mix) error {
	counts, err := outbox.CountByKind(ctx, w.Pool)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(out, "\n== Email: %d rows\n", mix.Emails)
	fmt.Fprintln(tw, "  KIND\tSTATUS\tROWS\tRETRIED")
	for _, c := range counts {
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\n", c.Kind, c.Status, c.Rows, c.Retried)
	}
	tw.Flush()

	failed, err := outbox.ListFailed(ctx, w.Pool, 0)
	if err != nil {
		return err
	}
	for _, r := range failed {
		fmt.Fprintf(out, "  failed: %s — %s\n", r.To, r.LastError)
	}

	msgs := w.Sink.Messages()
	pdfs, dups := 0, 0
	for _, m := range msgs {
		if bytes.Contains(m.Data, []byte("application/pdf")) {
			pdfs++
		}
	}
	for _, n := range w.Sink.CountByRowID() {
		dups += n - 1
	}
	fmt.Fprintf(out, "  SMTP sink: %d messages (%d with a PDF), %d duplicates\n", len(msgs), pdfs, dups)

	left, err := outbox.CountSecretsLeft(ctx, w.Pool)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  scrubbed: %s removed from %d sent rows; %d sent rows still hold one (want 0)\n",
		strings.Join(secretKeys, ", "), left.Sent, left.SentHolding)
	if len(left.FailedKeys) > 0 {
		fmt.Fprintf(out, "  the failed row keeps %s, so `worker requeue email <id>` can still send it whole\n",
			strings.Join(left.FailedKeys, ", "))
	}
	plain, err := outbox.Get(ctx, w.Pool, mix.plainSQLRow)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  the plain-SQL INSERT row: %s\n", plain.Status)
	receiptRow, err := outbox.Get(ctx, w.Pool, mix.receiptRow)
	if err != nil {
		return err
	}
	receiptStatus := receiptRow.Status
	receipt := "not received"
	for _, m := range w.Sink.Messages() {
		if m.RowID == mix.receiptRow {
			receipt = fmt.Sprintf("received as %q", m.Subject)
		}
	}
	fmt.Fprintf(out, "  the receipt row (kind receipt, from a template directory, by plain SQL): %s, %s\n", receiptStatus, receipt)
	return nil
}

func summarizeWebhooks(ctx context.Context, out io.Writer, w *World, mix Mix) error {
	fan, err := webhook.CountFanOut(ctx, w.Pool)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n== Webhooks: %d events enqueued → %d dispatched outbox rows → %d events (%d without a producing row)\n",
		mix.Events, fan.Dispatched, fan.Events, fan.Orphans)

	tallies, err := webhook.TallyEndpoints(ctx, w.Pool)
	if err != nil {
		return err
	}
	type line struct {
		url, state                          string
		ok, failed, retried, attempts, dups int
		requests, bad                       int
		statuses                            map[int]int
	}
	var lines []line
	for i, e := range tallies {
		l := line{url: e.URL, ok: e.Succeeded, failed: e.Failed, retried: e.Retried, attempts: e.Attempts}
		l.state = "enabled"
		if !e.Enabled {
			l.state = "disabled: " + e.DisabledReason
		}
		if i < len(w.receivers) {
			l.requests, _, l.dups, l.bad, l.statuses = w.receivers[i].tally()
		}
		lines = append(lines, l)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  RECEIVER\tDELIVERED\tRETRIED\tFAILED\tREQUESTS (ANSWERS)\tBAD SIGNATURES\tDUPLICATES\tENDPOINT")
	for i, l := range lines {
		name := l.url
		if i < len(w.receivers) {
			name = w.receivers[i].name
		}
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d (%s)\t%d\t%d\t%s\n", name, l.ok, l.retried, l.failed,
			l.requests, answers(l.statuses), l.bad, l.dups, l.state)
	}
	tw.Flush()
	fmt.Fprintln(out, "  every request carried a Standard Webhooks signature, verified by the reference library;")
	fmt.Fprintln(out, "  the demo compresses the retry schedule to 1 s, 2 s, 3 s (production: 5 s … 10 h)")
	return nil
}

func answers(statuses map[int]int) string {
	codes := make([]int, 0, len(statuses))
	for c := range statuses {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%d×%d", statuses[c], c)
	}
	return strings.Join(parts, ", ")
}
