package soak

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Tally is what a soak found. Print shows it; Problems says whether the
// transport kept its promise.
type Tally struct {
	Seed                               uint64
	Emails, Events, Endpoints, Workers int
	Setup, Chaos, Quiet, Total         time.Duration
	Finished                           bool // every row terminal before the timeout

	// What was done to the workers and the database.
	Crashes                 []Crash
	Kills, KillsRunning     int // kill -9s; of them, of workers already serving
	LeaderKills             int // kill -9s of the River leader
	SelfExits, BootFailures int // running workers that exited on their own; workers that never came up
	WorkerProcesses         int // started, replacements included
	Restart                 *Restart
	UncleanStops            []string // workers that did not stop cleanly on SIGTERM at the end
	WorkerPanics            []string
	LogDir                  string // the workers' logs, when kept (a problem was found, or Options.LogDir)

	// What the kills did to River (see stuckWatch).
	StuckJobs                     map[string]time.Duration // per job kind: longest seen running on a dead worker
	Leaderless, LeaderlessLongest time.Duration            // no live leader: in total, and the longest stretch

	// Rows per final status.
	EmailStatus, OutboxStatus, DeliveryStatus map[string]int
	// EventsPerOutboxRow counts outbox rows by how many events they
	// produced (webhook_events.outbox_id is UNIQUE, so at most 1).
	EventsPerOutboxRow map[int]int

	Sink      SinkCounts
	Receivers ReceiverCounts
	Lost      Lost

	// Sends per row: how many rows reached the sink (or a receiver) n
	// times. Duplicates are the sends beyond the first.
	EmailSends, DeliverySends           map[int]int
	EmailDuplicates, DeliveryDuplicates int
	Explained                           map[string]int // cause → duplicates it explains
	Unexplained                         []RowDuplicates
	Worst                               []RowDuplicates
	MarkEvents                          MarkEventCounts

	EmailClaims, EmailClaimsWithoutData      int // attempts stamped on email rows; of them, claims that never reached DATA
	DeliveryAttempts, DeliveryAttemptsLogged int // attempts stamped on deliveries; of them, ones with a logged result

	// Permanent errors: the rows planned to get 550, the rows the sink
	// answered 550, and the differences with the failed set.
	PermanentPlanned, PermanentAnswered, EmailsFailed int
	EmailsPossiblyDelivered                           int // failed because a held reply to the final dot left them possibly delivered
	EmailsDeliveredThenPossiblyDelivered              int // of those, accepted by an earlier attempt whose mark a crash or lease expiry lost
	FailedNotPermanent, PermanentNotFailed            []string
	AcceptedNotDispatched                             []string // reached the sink but recorded otherwise
	// Phantoms are acceptances of rows or events the soak never enqueued.
	Phantoms int

	FailedDeliveries          []string // "id: last error"
	FailedDeliveriesExhausted int      // of them, ones that used up their retry schedule
}

// SinkCounts are the SMTP sink's answers to DATA.
type SinkCounts struct {
	Attempts, Accepted, Transient451, Permanent550, Hung, WithoutRowID int
}

// ReceiverCounts add up every receiver.
type ReceiverCounts struct {
	Requests, Accepted, Errors500, Held, BadSignatures int
}

// Lost counts rows the transport dropped; every field must be zero.
type Lost struct {
	EmailsMissing         int // enqueued, gone from email_outbox
	EmailsNotTerminal     int // still pending at the end
	EmailsSentNotSeen     int // dispatched, but the sink never accepted them
	OutboxMissing         int // enqueued, gone from webhook_outbox
	OutboxNotTerminal     int // still pending
	OutboxFailed          int // fan-out given up: the event was never created
	EventsMissing         int // dispatched outbox rows with no event
	DeliveriesMissing     int // event × endpoint pairs with no delivery row
	DeliveriesNotTerminal int
	DeliveriesOKNotSeen   int // succeeded, but the receiver never accepted them
}

// Total is the sum.
func (l Lost) Total() int {
	return l.EmailsMissing + l.EmailsNotTerminal + l.EmailsSentNotSeen + l.OutboxMissing + l.OutboxNotTerminal +
		l.OutboxFailed + l.EventsMissing + l.DeliveriesMissing + l.DeliveriesNotTerminal + l.DeliveriesOKNotSeen
}

// String names the non-zero counts.
func (l Lost) String() string {
	var parts []string
	for _, f := range []struct {
		n    int
		what string
	}{
		{l.EmailsMissing, "emails missing"}, {l.EmailsNotTerminal, "emails not terminal"},
		{l.EmailsSentNotSeen, "emails dispatched but never accepted by the sink"},
		{l.OutboxMissing, "webhook_outbox rows missing"}, {l.OutboxNotTerminal, "webhook_outbox rows not terminal"},
		{l.OutboxFailed, "fan-outs failed"}, {l.EventsMissing, "outbox rows dispatched without an event"},
		{l.DeliveriesMissing, "deliveries missing"}, {l.DeliveriesNotTerminal, "deliveries not terminal"},
		{l.DeliveriesOKNotSeen, "deliveries succeeded but never accepted by the receiver"},
	} {
		if f.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", f.n, f.what))
		}
	}
	return strings.Join(parts, ", ")
}

// MarkEventCounts are workers' log lines about marks that did not apply.
type MarkEventCounts struct {
	EmailFailed, EmailStale, DeliveryLost, DeliveryStale int
}

// RowDuplicates is one row's duplicates and what explains them.
type RowDuplicates struct {
	Kind         string // "email" or "webhook"
	ID           string // email row id, or delivery id
	Sends        int
	Duplicates   int
	LivedThrough int      // crashes, restart and lease expiries while it was pending
	Causes       []string // one per explained duplicate
	Unexplained  int
}

// Causes of duplicates.
const (
	CauseKill        = "kill -9"
	CauseExit        = "worker exit"
	CauseRestart     = "Postgres restart"
	CauseLeaseExpiry = "lease expiry"
)

// Problems lists every way the run broke the transport's promise; empty
// means it held.
func (t *Tally) Problems() []string {
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	if !t.Finished {
		add("rows were still not terminal when the timeout ended the run")
	}
	if n := t.Lost.Total(); n > 0 {
		add("%d rows lost: %s", n, t.Lost)
	}
	if len(t.Unexplained) > 0 {
		n := 0
		for _, u := range t.Unexplained {
			n += u.Unexplained
		}
		add("%d duplicates on %d rows explained by no crash, restart or lease expiry", n, len(t.Unexplained))
	}
	if len(t.FailedNotPermanent) > 0 {
		add("%d emails failed that were never given a permanent error: %s", len(t.FailedNotPermanent), sample(t.FailedNotPermanent))
	}
	if len(t.PermanentNotFailed) > 0 {
		add("%d emails given a permanent error did not end failed: %s", len(t.PermanentNotFailed), sample(t.PermanentNotFailed))
	}
	if t.PermanentAnswered != t.PermanentPlanned {
		add("the sink answered 550 to %d rows, but %d were planned", t.PermanentAnswered, t.PermanentPlanned)
	}
	if len(t.AcceptedNotDispatched) > 0 {
		add("%d emails reached the sink but are not recorded dispatched: %s", len(t.AcceptedNotDispatched), sample(t.AcceptedNotDispatched))
	}
	for n, rows := range t.EventsPerOutboxRow {
		if n > 1 {
			add("%d webhook_outbox rows produced %d events each", rows, n)
		}
	}
	if t.Phantoms > 0 {
		add("%d messages or requests were accepted for rows the soak never enqueued", t.Phantoms)
	}
	if t.Receivers.BadSignatures > 0 {
		add("%d webhook requests failed signature verification", t.Receivers.BadSignatures)
	}
	if n := len(t.FailedDeliveries) - t.FailedDeliveriesExhausted; n > 0 {
		add("%d deliveries failed without exhausting their retries: %s", n, sample(t.FailedDeliveries))
	}
	if t.Restart != nil && t.Restart.Err != "" {
		add("the Postgres restart failed: %s", t.Restart.Err)
	}
	if len(t.WorkerPanics) > 0 {
		add("workers panicked %d times: %s", len(t.WorkerPanics), sample(t.WorkerPanics))
	}
	return p
}

// Err is Problems as one error, or nil.
func (t *Tally) Err() error {
	p := t.Problems()
	if len(p) == 0 {
		return nil
	}
	return fmt.Errorf("soak found %d problems:\n  - %s", len(p), strings.Join(p, "\n  - "))
}

func sample(s []string) string {
	if len(s) > 5 {
		return strings.Join(s[:5], ", ") + fmt.Sprintf(" … (%d more)", len(s)-5)
	}
	return strings.Join(s, ", ")
}

// event is something that can explain a duplicate: a crash or a lease
// expiry at a point in time, or the restart over an interval.
type event struct {
	from, to time.Time
	cause    string
	label    string
	lag      time.Duration // how long after the duplicate it may be recorded
}

// followedByCrash reports whether one of events (kills, the restart, lease
// expiries) happened after t: what lets an accepted send go unmarked and
// its row be claimed again.
func followedByCrash(t time.Time, events []event) bool {
	for _, e := range events {
		if !e.to.Before(t.Add(-explainSlack)) {
			return true
		}
	}
	return false
}

// explain attributes a row's duplicates: the k-th extra acceptance must have
// an event of its own between the previous acceptance (less explainSlack)
// and it. Of the candidates it names the one nearest the previous
// acceptance — the send whose mark never landed — so the cause shown is
// the one that struck while that row was in flight; on a tie a crash wins.
//
// A resend sooner than minResend after the previous acceptance is never
// explained: the lease that should have kept the row from being claimed
// again did not hold.
func explain(rd *RowDuplicates, accepted []time.Time, events []event, pendingFrom, pendingTo time.Time, minResend time.Duration) {
	rd.Sends = len(accepted)
	rd.Duplicates = max(0, len(accepted)-1)
	for _, e := range events {
		if !e.to.Before(pendingFrom.Add(-explainSlack)) && !e.from.After(pendingTo) {
			rd.LivedThrough++
		}
	}
	distance := func(e event, t time.Time) time.Duration {
		switch {
		case t.Before(e.from):
			return e.from.Sub(t)
		case t.After(e.to):
			return t.Sub(e.to)
		}
		return 0
	}
	rank := map[string]int{CauseKill: 0, CauseExit: 0, CauseRestart: 1, CauseLeaseExpiry: 2}
	used := make([]bool, len(events))
	for k := 1; k < len(accepted); k++ {
		prev := accepted[k-1]
		lo, hi := prev.Add(-explainSlack), accepted[k]
		if gap := hi.Sub(prev); gap < minResend {
			rd.Unexplained++
			rd.Causes = append(rd.Causes, fmt.Sprintf("UNEXPLAINED: sent again %s later, inside the lease", gap.Round(time.Millisecond)))
			continue
		}
		best := -1
		for i, e := range events {
			if used[i] || e.to.Before(lo) || e.from.After(hi.Add(e.lag)) {
				continue
			}
			if best < 0 {
				best = i
				continue
			}
			d, bd := distance(e, prev), distance(events[best], prev)
			if d < bd || (d == bd && rank[e.cause] < rank[events[best].cause]) {
				best = i
			}
		}
		if best < 0 {
			rd.Unexplained++
			rd.Causes = append(rd.Causes, "UNEXPLAINED")
			continue
		}
		used[best] = true
		rd.Causes = append(rd.Causes, events[best].label)
	}
}

// tally reads the database, the sink, the receivers and the worker logs.
// The workers are stopped by now: nothing changes under it.
func (r *run) tally(ctx context.Context) (*Tally, error) {
	crashes, procs := r.fleet.snapshot()
	t := &Tally{
		Seed: r.opts.Seed, Emails: len(r.load.emails), Events: len(r.load.events), Endpoints: len(r.endpoints),
		Workers: r.opts.Workers, Chaos: r.chaosEnd.Sub(r.chaosStart), Quiet: r.quietEnd.Sub(r.chaosEnd),
		Total: time.Since(r.start), Finished: r.finished, Crashes: crashes, WorkerProcesses: len(procs),
		Restart: r.restart, UncleanStops: r.unclean, StuckJobs: r.stuck.snapshot(), EventsPerOutboxRow: map[int]int{},
		EmailSends: map[int]int{}, DeliverySends: map[int]int{}, Explained: map[string]int{},
		EmailStatus: map[string]int{}, OutboxStatus: map[string]int{}, DeliveryStatus: map[string]int{},
	}
	_, t.Leaderless, t.LeaderlessLongest = r.stuck.leaderGap()
	t.LeaderKills = r.leaderKills

	// Events every row shares: crashes and the restart.
	var shared []event
	for _, c := range crashes {
		cause, what := CauseKill, CauseKill
		if !c.Killed {
			cause, what = CauseExit, CauseExit+" ("+c.Status+")"
		}
		t.Kills += b2i(c.Killed)
		t.KillsRunning += b2i(c.Killed && c.Running)
		t.SelfExits += b2i(!c.Killed && c.Running)
		t.BootFailures += b2i(!c.Killed && !c.Running)
		if !c.Running {
			continue // it never served, so it held no row
		}
		shared = append(shared, event{from: c.At, to: c.At, cause: cause,
			label: fmt.Sprintf("%s pid %d at %s", what, c.PID, r.offset(c.At))})
	}
	if r.restart != nil {
		shared = append(shared, event{from: r.restart.Start, to: r.restart.End, cause: CauseRestart,
			label: fmt.Sprintf("Postgres restart at %s", r.offset(r.restart.Start))})
	}
	// Lease expiries, per row: marks that did not apply.
	marks := map[string][]event{}
	for _, p := range procs {
		wl, err := readWorkerLog(p.logPath)
		if err != nil {
			return nil, err
		}
		t.WorkerPanics = append(t.WorkerPanics, wl.panics...)
		for _, m := range wl.marks {
			what, lag := "mark lost", time.Duration(0)
			if m.Stale {
				what, lag = "stale mark", staleMarkLag
			}
			marks[m.Row] = append(marks[m.Row], event{from: m.At, to: m.At, cause: CauseLeaseExpiry, lag: lag,
				label: fmt.Sprintf("%s (%s by pid %d at %s)", CauseLeaseExpiry, what, p.pid, r.offset(m.At))})
			switch {
			case strings.Contains(m.Msg, "email") && m.Stale:
				t.MarkEvents.EmailStale++
			case strings.Contains(m.Msg, "email"):
				t.MarkEvents.EmailFailed++
			case m.Stale:
				t.MarkEvents.DeliveryStale++
			default:
				t.MarkEvents.DeliveryLost++
			}
		}
	}
	rowEvents := func(id string) []event { return append(append([]event(nil), shared...), marks[id]...) }

	if err := r.tallyEmails(ctx, t, rowEvents); err != nil {
		return nil, err
	}
	if err := r.tallyWebhooks(ctx, t, rowEvents); err != nil {
		return nil, err
	}

	slices.SortFunc(t.Worst, func(a, b RowDuplicates) int {
		return cmp.Or(cmp.Compare(b.Duplicates, a.Duplicates), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.ID, b.ID))
	})
	if len(t.Worst) > 10 {
		t.Worst = t.Worst[:10]
	}
	return t, nil
}

func (r *run) tallyEmails(ctx context.Context, t *Tally, rowEvents func(string) []event) error {
	accepted := map[string][]time.Time{}
	for _, m := range r.sink.Messages() {
		accepted[m.RowID] = append(accepted[m.RowID], m.At)
	}
	r.mail.mu.Lock()
	t.Sink = SinkCounts{Accepted: r.sink.Len(), Transient451: r.mail.transient, Hung: r.mail.hung, WithoutRowID: r.mail.unknown}
	dataSeen := map[string]int{}
	for id, n := range r.mail.attempts {
		t.Sink.Attempts += n
		dataSeen[id] = n
	}
	hung := maps.Clone(r.mail.hungRows)
	answered := map[string]bool{}
	for id, n := range r.mail.answered {
		t.Sink.Permanent550 += n
		answered[id] = true
	}
	r.mail.mu.Unlock()
	t.PermanentPlanned = len(r.load.permanent)
	t.PermanentAnswered = len(answered)

	rows, err := r.pool.Query(ctx, `SELECT id::text, status, attempts, created_at, dispatched_at FROM email_outbox`)
	if err != nil {
		return fmt.Errorf("read email_outbox: %w", err)
	}
	type emailRow struct {
		ID           string
		Status       string
		Attempts     int
		CreatedAt    time.Time
		DispatchedAt *time.Time
	}
	all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[emailRow])
	if err != nil {
		return fmt.Errorf("read email_outbox: %w", err)
	}
	seen := map[string]bool{}
	for _, e := range all {
		seen[e.ID] = true
		t.EmailStatus[e.Status]++
		t.EmailClaims += e.Attempts
		t.EmailClaimsWithoutData += max(0, e.Attempts-dataSeen[e.ID])
		acc := accepted[e.ID]
		lostMark := false // accepted, then failed as possibly delivered after a crash
		switch e.Status {
		case "pending":
			t.Lost.EmailsNotTerminal++
		case "dispatched":
			if len(acc) == 0 {
				t.Lost.EmailsSentNotSeen++
			}
		case "failed":
			t.EmailsFailed++
			if hung[e.ID] && !answered[e.ID] {
				// The relay never answered its final dot: possibly
				// delivered, failed rather than sent again (smtp.ErrPossiblyDelivered).
				t.EmailsPossiblyDelivered++
				// An earlier attempt may have been accepted and lost its
				// mark to a crash or a lease expiry: the row was delivered,
				// then re-claimed, and the held reply failed it. That is
				// consistent when something the row lived through came
				// after the acceptance; otherwise it is still a problem.
				if len(acc) > 0 && followedByCrash(acc[len(acc)-1], rowEvents(e.ID)) {
					t.EmailsDeliveredThenPossiblyDelivered++
					lostMark = true
				}
				break
			}
			if !answered[e.ID] {
				t.FailedNotPermanent = append(t.FailedNotPermanent, e.ID)
			}
		}
		if len(acc) > 0 && e.Status != "dispatched" && !lostMark {
			t.AcceptedNotDispatched = append(t.AcceptedNotDispatched, e.ID+" ("+e.Status+")")
		}
		if (answered[e.ID] || r.load.permanent[e.ID]) && e.Status != "failed" {
			t.PermanentNotFailed = append(t.PermanentNotFailed, e.ID+" ("+e.Status+")")
		}
		t.EmailSends[len(acc)]++
		if len(acc) < 2 {
			continue
		}
		rd := RowDuplicates{Kind: "email", ID: e.ID}
		end := acc[len(acc)-1]
		if e.DispatchedAt != nil && e.DispatchedAt.After(end) {
			end = *e.DispatchedAt
		}
		explain(&rd, acc, rowEvents(e.ID), e.CreatedAt, end, emailMinResend)
		r.addDuplicates(t, rd)
	}
	for _, id := range r.load.emails[:r.load.emailsEnqueued()] {
		if !seen[id] {
			t.Lost.EmailsMissing++
		}
	}
	for id, acc := range accepted {
		if !seen[id] {
			t.Phantoms += len(acc)
		}
	}
	return nil
}

func (r *run) tallyWebhooks(ctx context.Context, t *Tally, rowEvents func(string) []event) error {
	if len(r.load.events) == 0 {
		return nil
	}
	byEndpoint := map[string]map[string][]time.Time{}
	for i, rc := range r.receivers {
		byEndpoint[r.endpoints[i]] = rc.acceptances()
		c := rc.counts()
		t.Receivers.Requests += c.Requests
		t.Receivers.Accepted += c.Accepted
		t.Receivers.Errors500 += c.Errors
		t.Receivers.Held += c.Held
		t.Receivers.BadSignatures += c.BadSignatures
	}

	var outbox []struct {
		ID, Status string
	}
	rows, err := r.pool.Query(ctx, `SELECT id::text, status FROM webhook_outbox`)
	if err == nil {
		outbox, err = pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ ID, Status string }])
	}
	if err != nil {
		return fmt.Errorf("read webhook_outbox: %w", err)
	}
	var events []struct{ ID, OutboxID string }
	rows, err = r.pool.Query(ctx, `SELECT id::text, coalesce(outbox_id::text, '') FROM webhook_events`)
	if err == nil {
		events, err = pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ ID, OutboxID string }])
	}
	if err != nil {
		return fmt.Errorf("read webhook_events: %w", err)
	}
	type deliveryRow struct {
		ID, EventID, EndpointID, Status string
		Attempts, Logged                int
		CreatedAt                       time.Time
		DeliveredAt                     *time.Time
		LastError                       string
	}
	rows, err = r.pool.Query(ctx, `SELECT d.id::text, d.event_id::text, d.endpoint_id::text, d.status, d.attempts,
	(SELECT count(*) FROM webhook_delivery_attempts a WHERE a.delivery_id = d.id)::int,
	d.created_at, d.delivered_at, coalesce(d.last_error, '')
FROM webhook_deliveries d`)
	var deliveries []deliveryRow
	if err == nil {
		deliveries, err = pgx.CollectRows(rows, pgx.RowToStructByPos[deliveryRow])
	}
	if err != nil {
		return fmt.Errorf("read webhook_deliveries: %w", err)
	}

	seen := map[string]bool{}
	for _, o := range outbox {
		seen[o.ID] = true
		t.OutboxStatus[o.Status]++
		switch o.Status {
		case "pending":
			t.Lost.OutboxNotTerminal++
		case "failed":
			t.Lost.OutboxFailed++
		}
	}
	for _, id := range r.load.events[:r.load.eventsEnqueued()] {
		if !seen[id] {
			t.Lost.OutboxMissing++
		}
	}
	perOutbox := map[string]int{}
	for _, e := range events {
		perOutbox[e.OutboxID]++
	}
	for _, o := range outbox {
		n := perOutbox[o.ID]
		t.EventsPerOutboxRow[n]++
		if n == 0 && o.Status == "dispatched" {
			t.Lost.EventsMissing++
		}
	}

	have := map[[2]string]bool{}
	for _, d := range deliveries {
		have[[2]string{d.EventID, d.EndpointID}] = true
		t.DeliveryStatus[d.Status]++
		t.DeliveryAttempts += d.Attempts
		t.DeliveryAttemptsLogged += d.Logged
		acc := byEndpoint[d.EndpointID][d.EventID]
		switch d.Status {
		case "pending":
			t.Lost.DeliveriesNotTerminal++
		case "succeeded":
			if len(acc) == 0 {
				t.Lost.DeliveriesOKNotSeen++
			}
		case "failed":
			t.FailedDeliveries = append(t.FailedDeliveries, d.ID+": "+d.LastError)
			if strings.Contains(d.LastError, "gave up after") {
				t.FailedDeliveriesExhausted++
			}
		}
		t.DeliverySends[len(acc)]++
		if len(acc) < 2 {
			continue
		}
		rd := RowDuplicates{Kind: "webhook", ID: d.ID}
		end := acc[len(acc)-1]
		if d.DeliveredAt != nil && d.DeliveredAt.After(end) {
			end = *d.DeliveredAt
		}
		explain(&rd, acc, rowEvents(d.ID), d.CreatedAt, end, webhookMinResend)
		r.addDuplicates(t, rd)
	}
	for _, e := range events {
		for _, ep := range r.endpoints {
			if !have[[2]string{e.ID, ep}] {
				t.Lost.DeliveriesMissing++
			}
		}
	}
	for ep, byEvent := range byEndpoint {
		for event, acc := range byEvent {
			if !have[[2]string{event, ep}] {
				t.Phantoms += len(acc)
			}
		}
	}
	return nil
}

func (r *run) addDuplicates(t *Tally, rd RowDuplicates) {
	if rd.Kind == "email" {
		t.EmailDuplicates += rd.Duplicates
	} else {
		t.DeliveryDuplicates += rd.Duplicates
	}
	for _, c := range rd.Causes {
		for _, cause := range []string{CauseKill, CauseExit, CauseRestart, CauseLeaseExpiry} {
			if strings.HasPrefix(c, cause) {
				t.Explained[cause]++
				break
			}
		}
	}
	if rd.Unexplained > 0 {
		t.Unexplained = append(t.Unexplained, rd)
	}
	t.Worst = append(t.Worst, rd)
}

// offset is at as the progress lines show time: since the run started.
func (r *run) offset(at time.Time) string {
	return at.Sub(r.start).Round(100 * time.Millisecond).String()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
