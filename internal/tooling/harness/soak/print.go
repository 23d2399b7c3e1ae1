package soak

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Print writes the tally as a readable report.
func (t *Tally) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) }
	rnd := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }

	line("postbox soak — seed %d", t.Seed)
	line("load\t%d emails, %d webhook events × %d endpoints, %d worker processes at a time", t.Emails, t.Events, t.Endpoints, t.Workers)
	line("time\tsetup %s, chaos %s, quiet %s, total %s", rnd(t.Setup), rnd(t.Chaos), rnd(t.Quiet), rnd(t.Total))
	line("crashes\t%d kill -9 (%d of running workers, %d of workers still booting; %d of the River leader), %d running workers exited on their own",
		t.Kills, t.KillsRunning, t.Kills-t.KillsRunning, t.LeaderKills, t.SelfExits)
	line("worker processes\t%d started in all; %d failed to boot (Postgres down) and were retried", t.WorkerProcesses, t.BootFailures)
	if t.Restart != nil {
		status := "ok"
		if t.Restart.Err != "" {
			status = "FAILED: " + t.Restart.Err
		}
		line("Postgres restart\tdown for %s (%s)", rnd(t.Restart.End.Sub(t.Restart.Start)), status)
	} else {
		line("Postgres restart\tnone")
	}
	line("River leader\tnone alive for %s in all (longest stretch %s): no periodic passes (retries, prune) are inserted meanwhile; the lanes deliver on",
		rnd(t.Leaderless), rnd(t.LeaderlessLongest))
	if len(t.StuckJobs) > 0 {
		var kinds []string
		for k := range t.StuckJobs {
			kinds = append(kinds, k)
		}
		slices.Sort(kinds)
		var parts []string
		for _, k := range kinds {
			parts = append(parts, fmt.Sprintf("%s %s", strings.TrimPrefix(k, "postbox_"), t.StuckJobs[k]))
		}
		line("River jobs orphaned by kills\tlongest left \"running\": %s", strings.Join(parts, ", "))
	}
	line("")

	line("FINAL STATE")
	line("email_outbox\t%s", statuses(t.EmailStatus, "dispatched", "failed", "pending", "skipped"))
	if t.Events > 0 {
		line("webhook_outbox\t%s", statuses(t.OutboxStatus, "dispatched", "failed", "pending"))
		line("webhook_deliveries\t%s", statuses(t.DeliveryStatus, "succeeded", "failed", "pending"))
		line("events per outbox row\t%s", histogram(t.EventsPerOutboxRow, "event", "events"))
	}
	line("")

	line("FAR ENDS")
	line("SMTP sink\t%d DATA: %d accepted, %d × 451, %d × 550, %d held until the sender gave up",
		t.Sink.Attempts, t.Sink.Accepted, t.Sink.Transient451, t.Sink.Permanent550, t.Sink.Hung)
	line("email claims\t%d attempts stamped; %d never reached DATA (their worker died first, they were released unstarted, or the dial failed)",
		t.EmailClaims, t.EmailClaimsWithoutData)
	if t.Events > 0 {
		line("receivers\t%d requests: %d accepted, %d × 500, %d held past the budget, %d bad signatures",
			t.Receivers.Requests, t.Receivers.Accepted, t.Receivers.Errors500, t.Receivers.Held, t.Receivers.BadSignatures)
		line("delivery attempts\t%d stamped; %d logged with a result (the rest: released unstarted, died with their worker, or lost their mark)",
			t.DeliveryAttempts, t.DeliveryAttemptsLogged)
	}
	line("marks not applied\temail: %d failed, %d stale; webhook: %d lost, %d stale (from worker logs)",
		t.MarkEvents.EmailFailed, t.MarkEvents.EmailStale, t.MarkEvents.DeliveryLost, t.MarkEvents.DeliveryStale)
	line("")

	line("LOST (must be 0)\t%d", t.Lost.Total())
	l := t.Lost
	line("  emails\t%d missing, %d not terminal, %d dispatched but never accepted by the sink", l.EmailsMissing, l.EmailsNotTerminal, l.EmailsSentNotSeen)
	if t.Events > 0 {
		line("  webhook_outbox\t%d missing, %d not terminal, %d fan-outs failed, %d dispatched without an event",
			l.OutboxMissing, l.OutboxNotTerminal, l.OutboxFailed, l.EventsMissing)
		line("  deliveries\t%d missing, %d not terminal, %d succeeded but never accepted by the receiver",
			l.DeliveriesMissing, l.DeliveriesNotTerminal, l.DeliveriesOKNotSeen)
	}
	line("")

	line("DUPLICATES (each needs a crash, the restart or a lease expiry between two acceptances)")
	line("email sends per row\t%s", histogram(t.EmailSends, "send", "sends"))
	if t.Events > 0 {
		line("webhook sends per delivery\t%s", histogram(t.DeliverySends, "send", "sends"))
	}
	line("duplicates\t%d email, %d webhook", t.EmailDuplicates, t.DeliveryDuplicates)
	var causes []string
	for _, c := range []string{CauseKill, CauseExit, CauseRestart, CauseLeaseExpiry} {
		if n := t.Explained[c]; n > 0 {
			causes = append(causes, fmt.Sprintf("%d by %s", n, c))
		}
	}
	if len(causes) == 0 {
		causes = []string{"nothing to explain"}
	}
	line("explained\t%s", strings.Join(causes, ", "))
	unexplained := 0
	for _, u := range t.Unexplained {
		unexplained += u.Unexplained
	}
	line("UNEXPLAINED (must be 0)\t%d", unexplained)
	tw.Flush()

	if len(t.Worst) > 0 {
		fmt.Fprintln(w, "\nworst rows (sends; duplicates ≤ crashes + restart + lease expiries it lived through; what explains each):")
		rw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(rw, "  kind\trow\tsends\tdups\tlived through\texplained by")
		for _, rd := range t.Worst {
			fmt.Fprintf(rw, "  %s\t%s\t%d\t%d\t%d\t%s\n", rd.Kind, rd.ID, rd.Sends, rd.Duplicates, rd.LivedThrough, strings.Join(rd.Causes, "; "))
		}
		rw.Flush()
	}
	for i, u := range t.Unexplained {
		if i == 20 {
			fmt.Fprintf(w, "  … %d more rows with unexplained duplicates\n", len(t.Unexplained)-20)
			break
		}
		fmt.Fprintf(w, "  UNEXPLAINED %s %s: %d sends, %s\n", u.Kind, u.ID, u.Sends, strings.Join(u.Causes, "; "))
	}

	fmt.Fprintln(w)
	pw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(pw, "PERMANENT ERRORS\t%d rows planned for 550, %d answered 550, %d failed; failed == answered: %v\n",
		t.PermanentPlanned, t.PermanentAnswered, t.EmailsFailed,
		len(t.FailedNotPermanent) == 0 && len(t.PermanentNotFailed) == 0)
	fmt.Fprintf(pw, "possibly delivered\t%d rows failed because the sink held the reply to their final dot (not sent again); %d of them were accepted by an earlier attempt whose mark a crash lost\n",
		t.EmailsPossiblyDelivered, t.EmailsDeliveredThenPossiblyDelivered)
	if t.Events > 0 {
		fmt.Fprintf(pw, "failed deliveries\t%d (%d exhausted their retry schedule)\n", len(t.FailedDeliveries), t.FailedDeliveriesExhausted)
	}
	if len(t.UncleanStops) > 0 {
		fmt.Fprintf(pw, "final SIGTERM\t%d workers did not stop cleanly: %s\n", len(t.UncleanStops), sample(t.UncleanStops))
	}
	pw.Flush()

	if p := t.Problems(); len(p) > 0 {
		fmt.Fprintf(w, "\nRESULT: FAIL — %d problems:\n", len(p))
		for _, s := range p {
			fmt.Fprintf(w, "  - %s\n", s)
		}
		if t.LogDir != "" {
			fmt.Fprintf(w, "worker logs kept in %s\n", t.LogDir)
		}
		return
	}
	fmt.Fprintln(w, "\nRESULT: PASS — nothing lost, every duplicate explained, failed == permanent")
}

func statuses(m map[string]int, order ...string) string {
	var parts []string
	for _, s := range order {
		parts = append(parts, fmt.Sprintf("%s %d", s, m[s]))
	}
	for s, n := range m {
		if !slices.Contains(order, s) {
			parts = append(parts, fmt.Sprintf("%s %d", s, n))
		}
	}
	return strings.Join(parts, ", ")
}

func histogram(m map[int]int, one, many string) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		unit := many
		if k == 1 {
			unit = one
		}
		parts = append(parts, fmt.Sprintf("%d %s: %d", k, unit, m[k]))
	}
	return strings.Join(parts, ", ")
}
