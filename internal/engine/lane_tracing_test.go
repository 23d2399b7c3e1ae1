package engine_test

import (
	"context"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/engine/tracing"
	"github.com/postbox/postbox/internal/tooling/testsupport/spantest"
)

// A claim that took rows is a span, under the span of whoever ran the lane
// (a River job's), with the table, rows and units; its units run under it,
// so each row's span can link to the claim that took it. A claim that took
// nothing is no span: an idle lane claims every poll, and a trace of its
// polls would be noise paid for by every sampled trace.
func TestLane_ClaimsThatTookRowsAreSpans(t *testing.T) {
	t.Parallel()
	rec := spantest.New(t)
	ctx, job := rec.Tracer("river").Start(context.Background(), "river.work/shift")
	var mu sync.Mutex
	var unitSpans []trace.SpanContext
	unit := laneUnitCtx{run: func(ctx context.Context) {
		mu.Lock()
		unitSpans = append(unitSpans, trace.SpanContextFromContext(ctx))
		mu.Unlock()
	}}
	src := &laneSource{answer: func(i, _ int) (engine.Claim, error) {
		if i == 0 {
			return engine.Claim{Units: []engine.Unit{unit, unit}, Rows: 3, Full: true}, nil // so it claims again, and finds nothing
		}
		return engine.Claim{}, nil
	}}
	lane := engine.NewLane(engine.LaneConfig{Name: "email_outbox", Source: src, Slots: engine.NewSlots(4), Poll: never, HotPoll: never,
		Tracer: rec.Tracer(tracing.Name)})
	if _, err := lane.Run(ctx, engine.RunOptions{UntilIdle: true}); err != nil {
		t.Fatal(err)
	}
	job.End()
	claims := rec.Named(job.SpanContext().TraceID(), tracing.SpanClaim)
	if n := len(src.claims()); n != 2 {
		t.Fatalf("%d claims, want 2: one that took rows, one that took none", n)
	}
	if len(claims) != 1 {
		t.Fatalf("%d claim spans, want 1 (the claim that took rows; the empty one is none): %d claims made", len(claims), len(src.claims()))
	}
	c := claims[0]
	if c.Parent().SpanID() != job.SpanContext().SpanID() || spantest.Attr(c, tracing.Table) != "email_outbox" ||
		spantest.Attr(c, tracing.Rows) != "3" || spantest.Attr(c, tracing.Units) != "2" {
		t.Errorf("claim span: parent %v, table %s, rows %s, units %s", c.Parent().SpanID(),
			spantest.Attr(c, tracing.Table), spantest.Attr(c, tracing.Rows), spantest.Attr(c, tracing.Units))
	}
	if len(unitSpans) != 2 || unitSpans[0].SpanID() != c.SpanContext().SpanID() || unitSpans[1].SpanID() != c.SpanContext().SpanID() {
		t.Errorf("the units ran under %v, want the claim's span %v", unitSpans, c.SpanContext().SpanID())
	}
}

// laneUnitCtx is a unit that sees the context it runs in.
type laneUnitCtx struct{ run func(context.Context) }

func (u laneUnitCtx) Run(ctx context.Context) engine.Tally {
	u.run(ctx)
	return engine.Tally{Started: 1}
}

func (u laneUnitCtx) Panicked(context.Context, any) engine.Tally { return engine.Tally{} }
