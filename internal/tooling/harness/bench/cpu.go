package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// backends returns the server process ids of every connection to the
// bench database: the pools of the phase about to be measured are open by
// then (MinConns), so the set is complete.
func backends(ctx context.Context, pool *pgxpool.Pool) map[int]bool {
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return nil
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil
	}
	set := make(map[int]bool, len(pids))
	for _, p := range pids {
		set[int(p)] = true
	}
	return set
}

// cpuSample is the CPU time used so far by this process and by the
// Postgres backends serving the bench database (when the server is local
// and /proc is readable). Per message, it says which side a path spends
// its time on. Server processes shared by every database (WAL writer,
// checkpointer) are left out, and so are other databases' clients.
type cpuSample struct {
	self     time.Duration
	postgres map[int]time.Duration // per pid, so processes that came and went do not skew the delta
}

// clockTick is USER_HZ, 100 on every Linux this runs on.
const clockTick = 10 * time.Millisecond

func sampleCPU(pids map[int]bool) cpuSample {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	s := cpuSample{
		self:     time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		postgres: map[int]time.Duration{},
	}
	for pid := range pids {
		if comm, cpu, ok := procStat(pid); ok && comm == "postgres" {
			s.postgres[pid] = cpu
		}
	}
	return s
}

// cpuUse is the CPU spent between two samples.
type cpuUse struct {
	self, postgres time.Duration
	pgSeen         bool
}

func (a cpuSample) until(b cpuSample) cpuUse {
	u := cpuUse{self: b.self - a.self, pgSeen: len(b.postgres) > 0}
	for pid, t := range b.postgres {
		u.postgres += t - a.postgres[pid] // a process born in between counts from zero
	}
	return u
}

// perMessage formats the CPU per message, e.g. "CPU/msg: Go 210 µs, Postgres 380 µs".
func (u cpuUse) perMessage(n int) string {
	if n <= 0 {
		return ""
	}
	s := fmt.Sprintf("CPU/msg: Go %d µs", u.self.Microseconds()/int64(n))
	if u.pgSeen {
		s += fmt.Sprintf(", Postgres %d µs", u.postgres.Microseconds()/int64(n))
	}
	return s
}

// total is the CPU per message in µs, this process and Postgres together.
func (u cpuUse) total(n int) float64 {
	if n <= 0 {
		return 0
	}
	return float64((u.self + u.postgres).Microseconds()) / float64(n)
}

// machineBusy is the CPU time every process on the machine has spent so
// far (user, nice, system, irq, softirq, steal from /proc/stat), or zero
// where /proc/stat cannot be read: the workers, Postgres (its background
// writers too), the bench's own load and sinks — the whole cost of a
// message, whoever pays it.
func machineBusy() time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0
	}
	var busy int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system (idle iowait) irq softirq steal
		v, _ := strconv.ParseInt(fields[i], 10, 64)
		busy += v
	}
	return time.Duration(busy) * clockTick
}

// procsCPU is the CPU time the processes ps have used so far (Linux
// /proc; zero where it cannot be read).
func procsCPU(ps []*proc) time.Duration {
	var total time.Duration
	for _, p := range ps {
		if _, cpu, ok := procStat(p.pid()); ok {
			total += cpu
		}
	}
	return total
}

// procStat reads process pid's command name and the CPU time it has used
// (user and system) from /proc/pid/stat.
func procStat(pid int) (comm string, cpu time.Duration, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, false
	}
	// pid (comm) state ppid … utime(14) stime(15): comm may hold spaces,
	// so split after its closing parenthesis.
	line := string(data)
	open, closing := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || closing < open {
		return "", 0, false
	}
	fields := strings.Fields(line[closing+1:])
	if len(fields) < 13 {
		return "", 0, false
	}
	ut, _ := strconv.ParseInt(fields[11], 10, 64)
	st, _ := strconv.ParseInt(fields[12], 10, 64)
	return line[open+1 : closing], time.Duration(ut+st) * clockTick, true
}

// cpuSplit is where a span's machine CPU went: the product's processes,
// the Postgres backends serving the bench database (the load's included),
// this bench process (the load generator and the relays), and the rest —
// Postgres's shared writers, the kernel, the machine's other tenants.
type cpuSplit struct {
	machine, product, postgres, bench time.Duration
}

// splitFrom starts counting a span: call the returned func at its end.
func splitFrom(ctx context.Context, ctl *pgxpool.Pool, ps []*proc) func() cpuSplit {
	pids := backends(ctx, ctl)
	m, prod, s := machineBusy(), procsCPU(ps), sampleCPU(pids)
	return func() cpuSplit {
		u := s.until(sampleCPU(pids))
		return cpuSplit{machine: machineBusy() - m, product: procsCPU(ps) - prod, postgres: u.postgres, bench: u.self}
	}
}

// perMessage formats the split per message, e.g. "worker 2.40, Postgres
// backends 3.10, bench 0.90, rest 1.20 ms".
func (c cpuSplit) perMessage(product string, n int) string {
	if n <= 0 {
		return ""
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(n) }
	return fmt.Sprintf("%s %.2f, Postgres backends %.2f, bench (load, relay) %.2f, rest %.2f ms",
		product, ms(c.product), ms(c.postgres), ms(c.bench), ms(c.machine-c.product-c.postgres-c.bench))
}
