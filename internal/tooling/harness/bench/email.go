package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"golang.org/x/time/rate"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/smtp"
)

var discard = slog.New(slog.DiscardHandler)

const subject = "Your invoice from Example Ltd"

func recipientOf(i int) string { return "customer" + strconv.Itoa(i) + "@example.com" }

// setupURLOf is the message's single-use link: a secret field, so the
// dispatched mark scrubs it and a key ring seals it.
func setupURLOf(i int) string {
	return "https://billing.example.com/setup/" + strconv.Itoa(i) + "?token=8c1e0f4b9a7d4e2f"
}

// message is the i-th message of the postbox path: an invoice email with a
// 2 KB text body and a payment-setup link.
func (r *runner) message(i int) outbox.Email {
	return outbox.Email{
		Kind:       outbox.KindRaw,
		CustomerID: "cus_bench",
		Payload:    outbox.Payload{To: recipientOf(i), Subject: subject, Text: r.body, SetupURL: setupURLOf(i)},
	}
}

// peerArgs is the River peer's job: the same message, carried in the job's
// args as the outbox row carries it in its payload.
type peerArgs struct {
	To       string `json:"to"`
	Subject  string `json:"subject"`
	Text     string `json:"text"`
	SetupURL string `json:"setup_url"`
}

func (peerArgs) Kind() string { return "bench_peer_email" }

// peerWorker sends the job's message, as a user who picked "one River job
// per email" would write it.
type peerWorker struct {
	river.WorkerDefaults[peerArgs]
	mailer  *smtp.Mailer
	limiter *rate.Limiter // PeerProcess.Rate; nil sends at once
}

func (w *peerWorker) Work(ctx context.Context, job *river.Job[peerArgs]) error {
	if w.limiter != nil {
		// The job is already running: it holds one of MaxWorkers while it
		// waits, as a limit written into a River worker does.
		if err := w.limiter.Wait(ctx); err != nil {
			return err
		}
	}
	return w.mailer.Send(ctx, smtp.Message{
		RowID:   "job" + strconv.FormatInt(job.ID, 10),
		To:      job.Args.To,
		Subject: job.Args.Subject,
		Text:    job.Args.Text,
	})
}

// relay is a fresh sink and a Mailer on it. Both paths get the same
// Mailer configuration: plaintext to loopback, and MaxIdle large enough
// for the peer's workers, so neither path redials.
type relay struct {
	sink   *smtpsink.Sink
	mailer *smtp.Mailer
}

func (r *runner) relay() (*relay, error) {
	sink, err := smtpsink.Start(smtpsink.Options{DiscardData: true})
	if err != nil {
		return nil, err
	}
	mailer, err := smtp.New(smtp.Config{
		Host:    sink.Host(),
		Port:    sink.Port(),
		Mode:    smtp.ModeNone,
		From:    "billing@example.com",
		AppEnv:  "development",
		MaxIdle: r.maxIdle(),
	}, nil)
	if err != nil {
		sink.Close()
		return nil, err
	}
	return &relay{sink: sink, mailer: mailer}, nil
}

func (r *runner) maxIdle() int { return max(r.opts.PeerWorkers, r.opts.Concurrency) }

func (rl *relay) close() {
	rl.mailer.Close()
	rl.sink.Close()
}

// checkSink verifies that the sink holds exactly n messages with n
// distinct row ids, and returns a note saying so.
func checkSink(sink *smtpsink.Sink, n int) (string, error) {
	counts := sink.CountByRowID()
	dups := 0
	for _, c := range counts {
		dups += c - 1
	}
	got := sink.Len()
	if got != n || len(counts) != n || dups != 0 {
		return "", checkf("sink holds %d messages for %d distinct rows (%d duplicates), want %d", got, len(counts), dups, n)
	}
	return fmt.Sprintf("%d received, 0 duplicates", got), nil
}

// emailSection runs the email drain and the enqueue-cost rows of the
// paths — postbox, postbox with sealed secret fields, and the River peer —
// Trials times, rotating their order, and reports each figure's median
// trial with every trial's figure in its notes. On a machine shared with
// other work one trial can be an outlier either way; the ratio is of the
// medians.
func (r *runner) emailSection(ctx context.Context) error {
	keys, err := benchKeyRing()
	if err != nil {
		return err
	}
	paths := []func(context.Context) (float64, error){
		func(ctx context.Context) (float64, error) { return r.postboxDrain(ctx, nil) },
		func(ctx context.Context) (float64, error) { return r.postboxDrain(ctx, keys) },
		r.peerDrain,
	}
	rates := make([][]float64, len(paths))
	cpus := make([][]float64, len(paths)) // µs of CPU per message
	before := len(r.rep.Rows)
	for t := range r.opts.Trials {
		for k := range paths {
			i := (k + t) % len(paths) // rotate, so no path always runs first
			if t+k > 0 {
				if err := r.truncate(ctx); err != nil {
					return err
				}
			}
			if r.opts.Trials > 1 {
				r.logf("email: trial %d of %d", t+1, r.opts.Trials)
			}
			r.lastCPU = 0
			rate, err := paths[i](ctx)
			if err != nil {
				return err
			}
			rates[i] = append(rates[i], rate)
			cpus[i] = append(cpus[i], r.lastCPU)
		}
	}
	r.rep.Rows = append(r.rep.Rows[:before], medianRows(r.rep.Rows[before:], r.opts.Trials)...)
	if !r.opts.want(SectionEmail) {
		return nil
	}
	pb, sealed, peer := median(rates[0]), median(rates[1]), median(rates[2])
	if pb > 0 {
		r.add(Row{Section: "email drain", Path: "sealed / plain postbox", Figure: fmt.Sprintf("%+.1f%%", (sealed/pb-1)*100), Unit: "Δ",
			Notes: "the cost of sealing the secret fields (AES-256-GCM), medians of the same run"})
	}
	if peer > 0 {
		ratio := pb / peer
		var each []string
		for t := range rates[0] {
			if rates[2][t] > 0 {
				each = append(each, fmt.Sprintf("%.2f", rates[0][t]/rates[2][t]))
			}
		}
		r.add(Row{Section: "email drain", Path: "ratio postbox / River peer", Figure: fmt.Sprintf("%.2f", ratio), Unit: "×", Value: ratio,
			Notes: fmt.Sprintf("plain postbox over the peer, medians; per trial %s; ≥ 1.0 is the target, 1.5 the aim", strings.Join(each, ", "))})
	}
	if pbCPU, peerCPU := median(cpus[0]), median(cpus[2]); pbCPU > 0 && peerCPU > 0 {
		r.add(Row{Section: "email drain", Path: "ratio by CPU per message (peer ÷ postbox)", Figure: fmt.Sprintf("%.2f", peerCPU/pbCPU), Unit: "×", Value: peerCPU / pbCPU,
			Notes: fmt.Sprintf("median CPU per message, worker process + Postgres: postbox %.0f µs, peer %.0f µs; both paths are CPU-bound here, so this is their throughput ratio with the machine to themselves, and it moves less with outside load", pbCPU, peerCPU)})
	}
	return nil
}

// medianRows collapses rows repeated over trials (same section and path)
// into the median one by Value, listing every trial's figure in its notes.
func medianRows(rows []Row, trials int) []Row {
	if trials <= 1 {
		return rows
	}
	type key struct{ section, path string }
	var order []key
	byKey := map[key][]Row{}
	for _, row := range rows {
		k := key{row.Section, row.Path}
		if _, ok := byKey[k]; !ok {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], row)
	}
	out := make([]Row, 0, len(order))
	for _, k := range order {
		all := byKey[k]
		figures := make([]string, len(all))
		for i, row := range all {
			figures[i] = row.Figure
		}
		sorted := slices.Clone(all)
		slices.SortFunc(sorted, func(a, b Row) int { return cmp.Compare(a.Value, b.Value) })
		m := sorted[len(sorted)/2]
		m.Notes = fmt.Sprintf("median of %d trials (%s); %s", len(all), strings.Join(figures, ", "), m.Notes)
		out = append(out, m)
	}
	return out
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	return s[len(s)/2]
}

// benchKeyRing is a one-key ring with a fresh random key: the bench
// measures sealing, not key management.
func benchKeyRing() (*outbox.KeyRing, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	return outbox.ParseKeyRing("bench:" + base64.StdEncoding.EncodeToString(key))
}

// enqueueRow reports the enqueue cost of one path.
func (r *runner) enqueueRow(path string, n int, elapsed time.Duration, lat []time.Duration, notes string) {
	ps := percentiles(lat, 50, 99)
	rate := perSecond(n, elapsed)
	if notes != "" {
		notes = "; " + notes
	}
	r.add(Row{Section: "enqueue", Path: path, Figure: fmtRate(rate), Unit: "tx/s", Value: rate,
		Notes: fmt.Sprintf("%d txs by %d goroutines; per tx p50 %s ms, p99 %s ms%s", n, r.opts.Clients, fmtMs(ps[0]), fmtMs(ps[1]), notes)})
}

// postboxDrain enqueues N rows (each in its own transaction) and drains
// them with one Dispatcher; it returns messages/s. With keys, Enqueue seals
// the secret fields and the dispatcher opens them.
func (r *runner) postboxDrain(ctx context.Context, keys *outbox.KeyRing) (float64, error) {
	n, c := r.opts.N, r.opts.Clients
	pool, err := r.pool(ctx, r.opts.PoolSize)
	if err != nil {
		return 0, err
	}
	defer pool.Close()

	label, sealedNote := "postbox", ""
	if keys != nil {
		label, sealedNote = "postbox sealed", ", secret fields sealed"
	}
	enq := outbox.Enqueuer{Keys: keys}
	r.logf("email: %s: enqueueing %d rows, one transaction each, %d goroutines", label, n, c)
	elapsed, lat, err := parallel(ctx, n, c, func(ctx context.Context, i int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := enq.Enqueue(ctx, tx, r.message(i))
			return err
		})
	})
	if err != nil {
		return 0, fmt.Errorf("%s enqueue: %w", label, err)
	}
	if r.opts.want(SectionEnqueue) {
		path := "outbox.Enqueue"
		if keys != nil {
			path = "outbox.Enqueue, sealed (Enqueuer.Keys)"
		}
		r.enqueueRow(path, n, elapsed, lat, "no kick: the tick finds the row")
	}
	if !r.opts.want(SectionEmail) {
		return 0, nil
	}

	rl, err := r.relay()
	if err != nil {
		return 0, err
	}
	defer rl.close()
	d, err := outbox.NewDispatcher(pool, outbox.Config{Sender: rl.mailer, Concurrency: r.opts.Concurrency, Keys: keys, Leases: r.leases(), Logger: discard})
	if err != nil {
		return 0, err
	}
	if err := r.settle(ctx, pool, "email_outbox"); err != nil {
		return 0, err
	}

	r.logf("email: %s: draining with %d batches in flight", label, r.opts.Concurrency)
	pids := backends(ctx, pool)
	cpu0 := sampleCPU(pids)
	res, elapsed, err := drainAll(ctx, d, n)
	if err != nil {
		return 0, err
	}
	cpu := cpu0.until(sampleCPU(pids))
	var dispatched, total int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'dispatched'), count(*) FROM email_outbox`).Scan(&dispatched, &total); err != nil {
		return 0, err
	}
	if dispatched != n || total != n || res.Sent != n {
		return 0, checkf("%s: %d of %d rows dispatched (drain counted %d sent, %d retried, %d failed, %d stale)",
			label, dispatched, total, res.Sent, res.Retried, res.Failed, res.Stale)
	}
	note, err := checkSink(rl.sink, n)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", label, err)
	}
	rate := perSecond(n, elapsed)
	path := "postbox Dispatcher.Drain"
	if keys != nil {
		path += ", sealed (Config.Keys)"
	}
	r.add(Row{Section: "email drain", Path: path, Figure: fmtRate(rate), Unit: "msg/s", Value: rate,
		Notes: fmt.Sprintf("%d batches of ≤%d in flight%s; %d dispatched, %s; %d SMTP connections; %.2f s; %s",
			r.opts.Concurrency, r.leases().BatchSize, sealedNote, dispatched, note, rl.sink.Connections(), elapsed.Seconds(), cpu.perMessage(n))})
	r.lastCPU = cpu.total(n)
	return rate, nil
}

// drainAll runs Drain until n rows were sent, and times it.
func drainAll(ctx context.Context, d *outbox.Dispatcher, n int) (outbox.Tally, time.Duration, error) {
	var total outbox.Tally
	start := time.Now()
	deadline := start.Add(10 * time.Minute)
	for total.Sent < n {
		res, err := d.Drain(ctx, 10*time.Minute)
		if err != nil {
			return total, 0, fmt.Errorf("postbox drain: %w", err)
		}
		total.Add(res)
		if res.Retried+res.Failed+res.Stale+res.MarkErrors > 0 {
			return total, 0, checkf("postbox drain: %d retried, %d failed, %d stale marks, %d mark errors",
				res.Retried, res.Failed, res.Stale, res.MarkErrors)
		}
		if res.Claimed == 0 {
			if time.Now().After(deadline) {
				return total, 0, checkf("postbox drain: %d of %d sent, nothing left to claim", total.Sent, n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return total, time.Since(start), nil
}

// peerConfig is the River peer, tuned for speed as River's own bench is.
func (r *runner) peerConfig(mailer *smtp.Mailer) *river.Config {
	workers := river.NewWorkers()
	river.AddWorker(workers, &peerWorker{mailer: mailer})
	return &river.Config{
		Logger:            discard,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: r.opts.PeerWorkers}},
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Workers:           workers,
	}
}

// peerDrain inserts N River jobs (each with InsertTx in its own
// transaction), then starts a client and times it until all N completed;
// it returns messages/s.
func (r *runner) peerDrain(ctx context.Context) (float64, error) {
	n, c := r.opts.N, r.opts.Clients
	pool, err := r.pool(ctx, r.opts.PoolSize)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	rl, err := r.relay()
	if err != nil {
		return 0, err
	}
	defer rl.close()
	client, err := river.NewClient(riverpgxv5.New(pool), r.peerConfig(rl.mailer))
	if err != nil {
		return 0, fmt.Errorf("the River peer: %w", err)
	}

	r.logf("email: River peer: inserting %d jobs, one transaction each, %d goroutines", n, c)
	elapsed, lat, err := parallel(ctx, n, c, func(ctx context.Context, i int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := client.InsertTx(ctx, tx, peerArgs{To: recipientOf(i), Subject: subject, Text: r.body, SetupURL: setupURLOf(i)}, nil)
			return err
		})
	})
	if err != nil {
		return 0, fmt.Errorf("the River peer insert: %w", err)
	}
	if r.opts.want(SectionEnqueue) {
		r.enqueueRow("River InsertTx (peer)", n, elapsed, lat, "")
	}
	if !r.opts.want(SectionEmail) {
		return 0, nil
	}
	if err := r.settle(ctx, pool, "river_job"); err != nil {
		return 0, err
	}

	events, cancelSub := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: n + 1000,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed},
	})
	defer cancelSub()
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()

	r.logf("email: River peer: working with MaxWorkers %d", r.opts.PeerWorkers)
	pids := backends(ctx, pool)
	cpu0 := sampleCPU(pids)
	start := time.Now()
	if err := client.Start(runCtx); err != nil {
		return 0, fmt.Errorf("the River peer start: %w", err)
	}
	completed, failed := 0, 0
	timeout := time.NewTimer(10 * time.Minute)
	defer timeout.Stop()
	for completed+failed < n {
		select {
		case ev := <-events:
			if ev.Kind == river.EventKindJobCompleted {
				completed++
			} else {
				failed++
			}
		case <-timeout.C:
			return 0, checkf("River peer: %d of %d jobs completed after 10 minutes", completed, n)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	elapsed = time.Since(start)
	cpu := cpu0.until(sampleCPU(pids))
	stopCtx, cancelStop := context.WithTimeout(ctx, 30*time.Second)
	defer cancelStop()
	if err := client.Stop(stopCtx); err != nil {
		return 0, fmt.Errorf("the River peer stop: %w", err)
	}

	var done int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&done); err != nil {
		return 0, err
	}
	if failed > 0 || done != n {
		return 0, checkf("River peer: %d jobs completed in the table, %d failed events, want %d completed", done, failed, n)
	}
	note, err := checkSink(rl.sink, n)
	if err != nil {
		return 0, fmt.Errorf("the River peer: %w", err)
	}
	rate := perSecond(n, elapsed)
	r.add(Row{Section: "email drain", Path: "River peer (1 job per message)", Figure: fmtRate(rate), Unit: "msg/s", Value: rate,
		Notes: fmt.Sprintf("MaxWorkers %d, FetchCooldown 2ms, FetchPollInterval 20ms; %d completed, %s; %d SMTP connections; %.2f s; %s",
			r.opts.PeerWorkers, done, note, rl.sink.Connections(), elapsed.Seconds(), cpu.perMessage(n))})
	r.lastCPU = cpu.total(n)
	return rate, nil
}

// enqueueNoWake measures outbox.Enqueue with the wake-up trigger
// disabled, beside the enqueue row (trigger on): what waking the workers
// costs the application's transactions.
func (r *runner) enqueueNoWake(ctx context.Context) error {
	n, c := r.opts.N, r.opts.Clients
	pool, err := r.pool(ctx, r.opts.PoolSize)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := setWakeTrigger(ctx, pool, false); err != nil {
		return err
	}
	defer func() { _ = setWakeTrigger(context.WithoutCancel(ctx), pool, true) }()
	var enq outbox.Enqueuer
	r.logf("enqueue: outbox.Enqueue without the wake-up trigger, %d rows, %d goroutines", n, c)
	elapsed, lat, err := parallel(ctx, n, c, func(ctx context.Context, i int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := enq.Enqueue(ctx, tx, r.message(i))
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("enqueue without wake-up: %w", err)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM email_outbox`).Scan(&rows); err != nil {
		return err
	}
	if rows != n {
		return checkf("enqueue without wake-up: %d rows written, want %d", rows, n)
	}
	r.enqueueRow("outbox.Enqueue, wake-up trigger disabled", n, elapsed, lat, "the baseline for the wake-up's cost")
	return nil
}
