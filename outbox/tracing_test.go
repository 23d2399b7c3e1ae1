package outbox

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/postbox/postbox/internal/engine/tracing"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/internal/tooling/testsupport/spantest"
	"github.com/postbox/postbox/smtp"
)

// An email enqueued inside the application's span is attempted in that
// span's trace: the attempt is the enqueue span's child, with the row's
// id, kind, attempt and outcome, and its mark the attempt's child. A row
// written by plain SQL with a traceparent joins that trace the same way; a
// row with none starts its own. Each links to the River job that claimed
// it. No attribute carries a secret payload
// value or the relay's reply text (which can quote the recipient).
func TestTracing_EmailAttemptAndMarkJoinTheEnqueueTrace(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	rec := spantest.New(t)

	appCtx, app := rec.Tracer("app").Start(ctx, "POST /invoices/finalize")
	var enqueued string
	if err := pgx.BeginFunc(appCtx, pool, func(tx pgx.Tx) error {
		var err error
		enqueued, err = (&Enqueuer{}).Enqueue(appCtx, tx, Email{Kind: KindRaw, CustomerID: "cus_1", Payload: Payload{
			To: "ada@example.com", Subject: "Invoice", Text: "x", SetupURL: "https://pay.example.com/setup/s3cr3t"}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	app.End()
	bySQL := insertRow(t, pool, "raw", rawPayload("grace@example.com"))
	const sqlTrace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	if _, err := pool.Exec(ctx, `UPDATE email_outbox SET traceparent = $2 WHERE id = $1`, bySQL, sqlTrace); err != nil {
		t.Fatal(err)
	}
	orphan := insertRow(t, pool, "raw", rawPayload("lin@example.com"))

	d := newDispatcher(t, pool, newFakeSender(func(_ context.Context, m smtp.Message) error {
		if m.RowID == orphan {
			return &smtp.ReplyError{Code: 550, Text: "5.1.1 <lin@example.com> no such user"}
		}
		return nil
	}), func(c *Config) { c.TracerProvider = rec })
	// The claim runs under a River job's span, as in a worker.
	jobCtx, job := rec.Tracer("river").Start(ctx, "river.work/shift")
	if res, err := d.runBatch(jobCtx); err != nil || res.Sent != 2 || res.Failed != 1 {
		t.Fatalf("batch: %+v, %v", res, err)
	}
	job.End()

	sqlID := trace.SpanContextFromContext(tracing.WithParent(ctx, sqlTrace))
	for _, tc := range []struct {
		name    string
		row     string
		traceID trace.TraceID
		parent  trace.SpanID
		outcome string
	}{
		{"Enqueue", enqueued, app.SpanContext().TraceID(), app.SpanContext().SpanID(), "sent"},
		{"plain SQL with a traceparent", bySQL, sqlID.TraceID(), sqlID.SpanID(), "sent"},
	} {
		attempts := rec.Named(tc.traceID, tracing.SpanEmailAttempt)
		if len(attempts) != 1 {
			t.Fatalf("%s: %d attempt spans in the row's trace, want 1", tc.name, len(attempts))
		}
		a := attempts[0]
		if len(a.Links()) != 1 || a.Links()[0].SpanContext.SpanID() != job.SpanContext().SpanID() {
			t.Errorf("%s: attempt span links %v, want one, to the job's span", tc.name, a.Links())
		}
		if a.Parent().SpanID() != tc.parent || spantest.Attr(a, tracing.RowID) != tc.row || spantest.Attr(a, tracing.Attempt) != "1" ||
			spantest.Attr(a, tracing.Outcome) != tc.outcome || spantest.Attr(a, tracing.Kind) != "raw" {
			t.Errorf("%s: attempt span parent %v (want %v), row %s, attempt %s, outcome %s", tc.name, a.Parent().SpanID(), tc.parent,
				spantest.Attr(a, tracing.RowID), spantest.Attr(a, tracing.Attempt), spantest.Attr(a, tracing.Outcome))
		}
		marks := rec.Named(tc.traceID, tracing.SpanEmailMark)
		if len(marks) != 1 || marks[0].Parent().SpanID() != a.SpanContext().SpanID() || spantest.Attr(marks[0], tracing.MarkApplied) != "true" {
			t.Errorf("%s: %d mark spans; want one, the attempt's child, applied", tc.name, len(marks))
		}
	}
	var failed []string
	for _, s := range rec.Ended() {
		if s.Name() == tracing.SpanEmailAttempt && spantest.Attr(s, tracing.RowID) == orphan {
			// Its own trace, not one more child of the job's, which would
			// gather every row of a shift; linked to the job.
			if s.Parent().IsValid() || len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != job.SpanContext().SpanID() {
				t.Errorf("the row with no traceparent: attempt span parent %v, links %v; want a root linked to the job", s.Parent().SpanID(), s.Links())
			}
			failed = append(failed, spantest.Attr(s, tracing.Outcome)+" "+spantest.Attr(s, tracing.SMTPReply))
		}
	}
	if len(failed) != 1 || failed[0] != "failed 550" {
		t.Errorf("the refused row's attempt spans: %v, want one, failed with reply 550", failed)
	}
	if leaks := rec.Leaks("s3cr3t", "lin@example.com", "ada@example.com"); len(leaks) > 0 {
		t.Errorf("attributes carry a secret or an address: %v", leaks)
	}
}

// A mark that finds its row resolved elsewhere ends its span not applied,
// without an error status: a stale mark is expected under crashes.
func TestTracing_StaleMarkSpan(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	rec := spantest.New(t)
	id := insertRow(t, pool, "raw", rawPayload("ada@example.com"))
	d := newDispatcher(t, pool, newFakeSender(func(context.Context, smtp.Message) error {
		_, err := pool.Exec(context.Background(), `UPDATE email_outbox SET status = 'failed' WHERE id = $1`, id)
		return err
	}), func(c *Config) { c.TracerProvider = rec })
	if res, err := d.runBatch(ctx); err != nil || res.Stale != 1 {
		t.Fatalf("batch: %+v, %v", res, err)
	}
	for _, s := range rec.Ended() {
		if s.Name() == tracing.SpanEmailMark {
			if spantest.Attr(s, tracing.MarkApplied) != "false" || s.Status().Code != 0 {
				t.Errorf("stale mark span: applied %s, status %v; want false, unset", spantest.Attr(s, tracing.MarkApplied), s.Status())
			}
			return
		}
	}
	t.Fatal("no mark span")
}
