package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/smtp"
	"github.com/riverqueue/river"
)

// backlogLimit bounds one backlog drain.
const backlogLimit = 10 * time.Minute

// backlogSection drains a backlog of N messages with R processes of each
// path (postbox, the River peer with defaults, the River peer tuned), for
// every replica count and trial, and reports throughput from the first
// exec and from the first to the last send, each replica's share, the
// peak of SMTP connections and the ratios of postbox to the peer.
func (pr *poolRunner) backlogSection(ctx context.Context) error {
	type key struct {
		replicas int
		path     string
	}
	fromStart := map[key][]float64{}
	span := map[key][]float64{}
	paths := []path{pathPostbox, pathPeerDefaults, pathPeerTuned}
	if pr.po.Tracing {
		paths = append(paths, pathPostboxTraced)
	}
	cpu := map[key][]float64{}
	err := pr.trials(ctx, pr.po.Replicas, func(ctx context.Context, t, rc int) error {
		for _, p := range rotate(paths, t) {
			a, b, c, err := pr.backlogRun(ctx, p, rc)
			if err != nil {
				return err
			}
			k := key{rc, p.name}
			fromStart[k] = append(fromStart[k], a)
			span[k] = append(span[k], b)
			cpu[k] = append(cpu[k], c)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := pr.relayCeiling(ctx); err != nil {
		return err
	}
	for _, rc := range pr.po.Replicas {
		pb := key{rc, pathPostbox.name}
		for _, peer := range []path{pathPeerDefaults, pathPeerTuned} {
			pk := key{rc, peer.name}
			if median(fromStart[pk]) <= 0 || median(span[pk]) <= 0 {
				continue
			}
			ratio := median(fromStart[pb]) / median(fromStart[pk])
			var each []string
			for t := range fromStart[pb] {
				each = append(each, fmt.Sprintf("%.2f", fromStart[pb][t]/fromStart[pk][t]))
			}
			pr.add(Row{Section: titlePoolBacklog, Path: rp(rc) + "ratio postbox / " + peer.name, Figure: fmt.Sprintf("%.2f", ratio), Unit: "×", Value: ratio,
				Notes: fmt.Sprintf("from start, medians; per trial %s; first→last send %.2f×; 1.5× is the aim",
					strings.Join(each, ", "), median(span[pb])/median(span[pk]))})
		}
		if pr.po.Tracing {
			tk := key{rc, pathPostboxTraced.name}
			var each []string
			for t := range fromStart[pb] {
				each = append(each, fmt.Sprintf("%.2f", fromStart[tk][t]/fromStart[pb][t]))
			}
			ratio := median(fromStart[tk]) / median(fromStart[pb])
			pr.add(Row{Section: titlePoolBacklog, Path: rp(rc) + "ratio tracing on / off", Figure: fmt.Sprintf("%.2f", ratio), Unit: "×", Value: ratio,
				Notes: fmt.Sprintf("postbox from start, medians; per trial %s; machine CPU per message %.2f ms on against %.2f ms off (medians); %d OTLP exports, %.1f MB over the run",
					strings.Join(each, ", "), median(cpu[tk]), median(cpu[pb]), pr.otlp.requests.Load(), float64(pr.otlp.bytes.Load())/1e6)})
		}
	}
	return nil
}

// relayCeiling is what the SMTP path alone reaches at the same connections
// and relay delay: N sends through smtp.Mailer to one sink with the same
// DataDelay from Concurrency goroutines (one replica's worth), no database
// and no worker process. It is the bound of every path above, against which
// "% of the relay's limit" is to be read: the protocol's own round trips
// (MAIL, RCPT, DATA, the message) and the sink's work cost time on top of
// the relay's delay.
func (pr *poolRunner) relayCeiling(ctx context.Context) error {
	n, g := pr.po.N, pr.po.Concurrency
	sink, err := smtpsink.Start(smtpsink.Options{DiscardData: true, DataDelay: pr.po.RelayDelay})
	if err != nil {
		return err
	}
	defer sink.Close()
	mailer, err := smtp.New(smtp.Config{Host: sink.Host(), Port: sink.Port(), Mode: smtp.ModeNone,
		From: "billing@example.com", AppEnv: "development", MaxIdle: g}, nil)
	if err != nil {
		return err
	}
	defer mailer.Close()
	elapsed, _, err := parallel(ctx, n, g, func(ctx context.Context, i int) error {
		return mailer.Send(ctx, smtp.Message{RowID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
			To: "ada@example.com", Subject: "ceiling", Text: "hello"})
	})
	if err != nil {
		return fmt.Errorf("relay ceiling: %w", err)
	}
	rate := perSecond(n, elapsed)
	note := "no relay delay"
	if pr.po.RelayDelay > 0 {
		note = fmt.Sprintf("%.0f%% of the relay's limit %.0f msg/s", 100*rate/pr.po.relayLimit(1), pr.po.relayLimit(1))
	}
	pr.add(Row{Section: titlePoolBacklog, Path: "R=1 relay ceiling: smtp.Mailer alone, no database", Figure: fmtRate(rate), Unit: "msg/s",
		Value: rate, Notes: fmt.Sprintf("%d sends from %d goroutines to one sink (relay delay %s), in the bench process; %s: the bound of every path above on this machine",
			n, g, pr.po.RelayDelay, note)})
	return nil
}

// backlogRun inserts N messages for path p, starts rc processes and times
// them until every message arrived. It returns msg/s from the first exec
// and from the first to the last send, and the machine's CPU per message
// (ms, /proc/stat) over the same time.
func (pr *poolRunner) backlogRun(ctx context.Context, p path, rc int) (float64, float64, float64, error) {
	n := pr.po.N
	label := rp(rc) + p.name
	if err := pr.truncate(ctx); err != nil {
		return 0, 0, 0, err
	}
	pr.logf("pool backlog: %s: inserting %d", label, n)
	ids, table, err := pr.insertBacklog(ctx, p, n)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("pool backlog %s: %w", label, err)
	}
	if err := pr.settle(ctx, pr.ctl, table); err != nil {
		return 0, 0, 0, err
	}
	rs, err := pr.relays(rc)
	if err != nil {
		return 0, 0, 0, err
	}
	defer rs.close()
	pr.logf("pool backlog: %s: starting %d process(es)", label, rc)
	busy := machineBusy()
	procs, started, err := pr.start(ctx, p, rs, rc, "backlog "+label)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("pool backlog %s: %w", label, err)
	}
	defer pr.stop(procs)
	t, all, err := pr.waitAll(ctx, rs, ids, backlogLimit, "pool backlog: "+label, procs)
	if err != nil {
		return 0, 0, 0, err
	}
	if !all {
		return 0, 0, 0, checkf("pool backlog %s: %d of %d messages arrived within %s (%d lost so far)", label, t.received, n, backlogLimit, n-t.received)
	}
	cpuMS := float64((machineBusy() - busy).Microseconds()) / 1000 / float64(n)
	time.Sleep(500 * time.Millisecond) // a duplicate sent just after the last first arrival still counts
	t = rs.tally(ids)
	if t.dups != 0 {
		return 0, 0, 0, checkf("pool backlog %s: %d duplicates among %d messages", label, t.dups, n)
	}
	ready := t.doneAt.Sub(started)
	fromStart := perSecond(n, ready)
	span := perSecond(n, t.doneAt.Sub(t.firstAt))
	pr.add(Row{Section: titlePoolBacklog, Path: label, Figure: fmtRate(fromStart) + " / " + fmtRate(span), Unit: "msg/s from start / first→last", Value: fromStart,
		Notes: fmt.Sprintf("%s; %d received, 0 duplicates, 0 lost; %.2f s from the first exec, first DATA at +%.2f s; machine CPU %.2f ms per message; %s",
			p.notes(pr.po), t.received, ready.Seconds(), t.firstAt.Sub(started).Seconds(), cpuMS, pr.po.relayNote(rc, fromStart, span))})
	shares, top := fmtShares(t.perSink)
	if rc > 1 {
		pr.add(Row{Section: titlePoolBacklog, Path: label + ": share per replica", Figure: shares, Unit: "msgs (%)", Value: top,
			Notes: fmt.Sprintf("messages each replica's own sink port received; a fair share is %.0f%%; the largest %.0f%%", 100/float64(rc), top)})
	}
	peaks := make([]string, len(rs.sinks))
	for i, s := range rs.sinks {
		peaks[i] = strconv.Itoa(s.PeakConnections())
	}
	pr.add(Row{Section: titlePoolBacklog, Path: label + ": peak SMTP connections", Figure: strconv.Itoa(rs.gauge.Peak()), Unit: "conns", Value: float64(rs.gauge.Peak()),
		Notes: fmt.Sprintf("open at once over all sinks; per replica %s; cap %d per process", strings.Join(peaks, " / "), pr.po.Concurrency)})
	return fromStart, span, cpuMS, nil
}

// insertBacklog writes n messages for p before any process starts:
// email_outbox rows by plain SQL for postbox, River jobs by InsertMany
// for the peer. It returns the row ids the sinks will see and the table.
func (pr *poolRunner) insertBacklog(ctx context.Context, p path, n int) ([]string, string, error) {
	const chunk = 1000
	ids := make([]string, 0, n)
	if p.peer == nil {
		for lo := 0; lo < n; lo += chunk {
			hi := min(lo+chunk, n) - 1
			rows, err := pr.ctl.Query(ctx, `INSERT INTO email_outbox (kind, customer_id, payload)
SELECT 'raw', 'cus_bench', jsonb_build_object('to', 'customer' || i || '@example.com', 'subject', $1::text, 'text', $2::text)
FROM generate_series($3::int, $4::int) AS i RETURNING id::text`, subject, pr.body, lo, hi)
			if err != nil {
				return nil, "", err
			}
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return nil, "", err
				}
				ids = append(ids, id)
			}
			if err := rows.Err(); err != nil {
				return nil, "", err
			}
		}
		return ids, "email_outbox", nil
	}
	client, err := peerInserter(pr.ctl, p.peer.cooldown)
	if err != nil {
		return nil, "", err
	}
	for lo := 0; lo < n; lo += chunk {
		params := make([]river.InsertManyParams, 0, chunk)
		for i := lo; i < min(lo+chunk, n); i++ {
			params = append(params, river.InsertManyParams{Args: peerArgs{To: recipientOf(i), Subject: subject, Text: pr.body}})
		}
		res, err := client.InsertMany(ctx, params)
		if err != nil {
			return nil, "", err
		}
		for _, r := range res {
			ids = append(ids, peerRowID(r.Job.ID))
		}
	}
	return ids, "river_job", nil
}

// peerRowID is the row id the peer's Message-ID carries (see peerWorker).
func peerRowID(jobID int64) string { return "job" + strconv.FormatInt(jobID, 10) }
