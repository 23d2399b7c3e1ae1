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
	rows, err := w.Pool.Query(ctx, `SELECT kind, status, count(*), count(*) FILTER (WHERE attempts > 1)
		FROM email_outbox GROUP BY 1, 2 ORDER BY 1, 2`)
	if err != nil {
		return err
	}
	defer rows.Close()
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(out, "\n== Email: %d rows\n", mix.Emails)
	fmt.Fprintln(tw, "  KIND\tSTATUS\tROWS\tRETRIED")
	for rows.Next() {
		var kind, status string
		var n, retried int
		if err := rows.Scan(&kind, &status, &n, &retried); err != nil {
			return err
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\n", kind, status, n, retried)
	}
	tw.Flush()
	if err := rows.Err(); err != nil {
		return err
	}

	failed, err := w.Pool.Query(ctx, `SELECT payload->>'to', last_error FROM email_outbox WHERE status = 'failed'`)
	if err != nil {
		return err
	}
	defer failed.Close()
	for failed.Next() {
		var to, why string
		if err := failed.Scan(&to, &why); err != nil {
			return err
		}
		fmt.Fprintf(out, "  failed: %s — %s\n", to, why)
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

	var keep, scrubbed int
	if err := w.Pool.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE status IN ('dispatched', 'skipped') AND payload ?| $1),
		count(*) FILTER (WHERE status IN ('dispatched', 'skipped'))
		FROM email_outbox`, secretKeys).Scan(&keep, &scrubbed); err != nil {
		return err
	}
	fmt.Fprintf(out, "  scrubbed: %s removed from %d sent rows; %d sent rows still hold one (want 0)\n",
		strings.Join(secretKeys, ", "), scrubbed, keep)
	var failedKeys []string
	if err := w.Pool.QueryRow(ctx, `SELECT COALESCE(array_agg(DISTINCT k ORDER BY k), '{}')
		FROM email_outbox, jsonb_object_keys(payload) k WHERE status = 'failed' AND k = ANY($1)`,
		secretKeys).Scan(&failedKeys); err != nil {
		return err
	}
	if len(failedKeys) > 0 {
		fmt.Fprintf(out, "  the failed row keeps %s, so `worker requeue email <id>` can still send it whole\n",
			strings.Join(failedKeys, ", "))
	}
	var plainStatus string
	if err := w.Pool.QueryRow(ctx, `SELECT status FROM email_outbox WHERE id = $1`, mix.plainSQLRow).Scan(&plainStatus); err != nil {
		return err
	}
	fmt.Fprintf(out, "  the plain-SQL INSERT row: %s\n", plainStatus)
	var receiptStatus string
	if err := w.Pool.QueryRow(ctx, `SELECT status FROM email_outbox WHERE id = $1`, mix.receiptRow).Scan(&receiptStatus); err != nil {
		return err
	}
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
	var outboxRows, events, orphans int
	if err := w.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM webhook_outbox WHERE status = 'dispatched'),
		(SELECT count(*) FROM webhook_events),
		(SELECT count(*) FROM webhook_events e WHERE NOT EXISTS (SELECT 1 FROM webhook_outbox o WHERE o.id = e.outbox_id))`).
		Scan(&outboxRows, &events, &orphans); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n== Webhooks: %d events enqueued → %d dispatched outbox rows → %d events (%d without a producing row)\n",
		mix.Events, outboxRows, events, orphans)

	rows, err := w.Pool.Query(ctx, `SELECT p.url, p.enabled, COALESCE(p.disabled_reason, ''),
		count(d.id) FILTER (WHERE d.status = 'succeeded'),
		count(d.id) FILTER (WHERE d.status = 'failed'),
		count(d.id) FILTER (WHERE d.status = 'succeeded' AND d.attempts > 1),
		COALESCE(sum(d.attempts), 0)
		FROM webhook_endpoints p LEFT JOIN webhook_deliveries d ON d.endpoint_id = p.id
		GROUP BY p.id ORDER BY p.created_at`)
	if err != nil {
		return err
	}
	defer rows.Close()
	type line struct {
		url, state                          string
		ok, failed, retried, attempts, dups int
		requests, bad                       int
		statuses                            map[int]int
	}
	var lines []line
	for i := 0; rows.Next(); i++ {
		var l line
		var enabled bool
		var reason string
		if err := rows.Scan(&l.url, &enabled, &reason, &l.ok, &l.failed, &l.retried, &l.attempts); err != nil {
			return err
		}
		l.state = "enabled"
		if !enabled {
			l.state = "disabled: " + reason
		}
		if i < len(w.receivers) {
			l.requests, _, l.dups, l.bad, l.statuses = w.receivers[i].tally()
		}
		lines = append(lines, l)
	}
	if err := rows.Err(); err != nil {
		return err
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
