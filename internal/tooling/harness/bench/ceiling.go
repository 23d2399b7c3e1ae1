package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/postbox/postbox/smtp"
)

// ceiling is the reference: N single-row autocommit UPDATEs, each its own
// commit, from the dispatcher's concurrency. Anything that commits once
// per row — a CAS mark — cannot beat it on this database.
func (r *runner) ceiling(ctx context.Context) error {
	n, c := r.opts.N, r.opts.Clients
	pool, err := r.pool(ctx, r.opts.PoolSize)
	if err != nil {
		return err
	}
	defer pool.Close()
	for _, q := range []string{
		`DROP TABLE IF EXISTS bench_ceiling`,
		`CREATE TABLE bench_ceiling (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0)`,
		`INSERT INTO bench_ceiling (id) SELECT generate_series(0, $1::int - 1)`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = append(args, n)
		}
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			return fmt.Errorf("ceiling: %w", err)
		}
	}
	if err := r.settle(ctx, pool, "bench_ceiling"); err != nil {
		return err
	}
	r.logf("ceiling: %d single-row UPDATE commits from %d goroutines", n, c)
	pids := backends(ctx, pool)
	cpu0 := sampleCPU(pids)
	elapsed, lat, err := parallel(ctx, n, c, func(ctx context.Context, i int) error {
		_, err := pool.Exec(ctx, `UPDATE bench_ceiling SET n = n + 1 WHERE id = $1`, i)
		return err
	})
	if err != nil {
		return fmt.Errorf("ceiling: %w", err)
	}
	cpu := cpu0.until(sampleCPU(pids))
	var sum int
	if err := pool.QueryRow(ctx, `SELECT sum(n) FROM bench_ceiling`).Scan(&sum); err != nil {
		return err
	}
	if sum != n {
		return checkf("ceiling: %d updates applied, want %d", sum, n)
	}
	ps := percentiles(lat, 50, 99)
	rate := perSecond(n, elapsed)
	r.add(Row{Section: "ceiling", Path: "UPDATE … SET n = n + 1 WHERE id = $1, autocommit", Figure: fmtRate(rate), Unit: "commits/s", Value: rate,
		Notes: fmt.Sprintf("%d rows, %d goroutines; per commit p50 %s ms, p99 %s ms; %s; the bound for one commit per row", n, c, fmtMs(ps[0]), fmtMs(ps[1]), cpu.perMessage(n))})
	if _, err := pool.Exec(ctx, `DROP TABLE bench_ceiling`); err != nil {
		return err
	}
	return r.smtpCeiling(ctx)
}

// smtpCeiling is the other reference: N sends through the same Mailer
// configuration to the same sink, no database at all, from as many
// goroutines as the peer has workers. No path that sends each message
// through this Mailer can beat it on this machine.
func (r *runner) smtpCeiling(ctx context.Context) error {
	n, g := r.opts.N, r.opts.PeerWorkers
	rl, err := r.relay()
	if err != nil {
		return err
	}
	defer rl.close()
	r.logf("ceiling: %d sends to the sink from %d goroutines, no database", n, g)
	cpu0 := sampleCPU(nil)
	elapsed, _, err := parallel(ctx, n, g, func(ctx context.Context, i int) error {
		m := r.message(i)
		return rl.mailer.Send(ctx, smtp.Message{RowID: "send" + strconv.Itoa(i), To: m.Payload.To, Subject: m.Payload.Subject, Text: m.Payload.Text})
	})
	if err != nil {
		return fmt.Errorf("ceiling: send: %w", err)
	}
	cpu := cpu0.until(sampleCPU(nil))
	note, err := checkSink(rl.sink, n)
	if err != nil {
		return fmt.Errorf("ceiling: %w", err)
	}
	rate := perSecond(n, elapsed)
	r.add(Row{Section: "ceiling", Path: "smtp.Mailer.Send to the sink alone, no database", Figure: fmtRate(rate), Unit: "msg/s", Value: rate,
		Notes: fmt.Sprintf("%d goroutines; %s; %s; the bound for anything that sends each message through this Mailer", g, note, cpu.perMessage(n))})
	return nil
}
