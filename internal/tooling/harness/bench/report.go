package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/postbox/postbox/internal/operator/devserver/pgserver"
)

// Report is one run: the machine, the rows of the table, and any EXPLAIN
// output.
type Report struct {
	Options  Options
	Machine  Machine
	Database string
	Started  time.Time
	Elapsed  time.Duration
	Rows     []Row
	Explains []Explain
	// Pool is set on a report of the pool sections (RunPool): its run
	// line replaces the in-process one.
	Pool *PoolOptions

	noCheckpoint bool
}

// Row is one line of the table.
type Row struct {
	Section string
	Path    string
	Figure  string // formatted; several figures are joined with " / "
	Unit    string
	Notes   string

	// Value is the row's main figure as a number, for callers that compare
	// (the ratio, the test); 0 for rows with several figures.
	Value float64
}

// Explain is the plan of one statement.
type Explain struct {
	Name string
	SQL  string
	Plan string
}

// Machine is what the figures ran on.
type Machine struct {
	CPUs      int
	CPUModel  string
	GoVersion string
	OS        string
	Postgres  string // version()
	Settings  string // the settings that bound commit rates
	LoadAvg   string // 1-minute load average at the start and the end of the run
}

func (m Machine) String() string {
	s := fmt.Sprintf("%d CPUs (%s), %s, %s; %s; %s",
		m.CPUs, m.CPUModel, m.OS, m.GoVersion, m.Postgres, m.Settings)
	if m.LoadAvg != "" {
		s += "; load average " + m.LoadAvg
	}
	return s
}

// loadAvg is the 1-minute load average, or "" where /proc has none. Above
// the CPU count, other work shares the machine and the figures are noisy.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	if f := strings.Fields(string(data)); len(f) > 0 {
		return f[0]
	}
	return ""
}

func (r *runner) machine(ctx context.Context) (Machine, error) {
	m := Machine{
		CPUs:      runtime.NumCPU(),
		CPUModel:  cpuModel(),
		GoVersion: runtime.Version(),
		OS:        runtime.GOOS + "/" + runtime.GOARCH,
		LoadAvg:   loadAvg(),
	}
	conn, err := pgserver.Connect(ctx, r.url)
	if err != nil {
		return m, fmt.Errorf("bench: connect: %w", err)
	}
	defer conn.Close(ctx)
	var version string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		return m, err
	}
	if i := strings.Index(version, " on "); i > 0 {
		version = version[:i]
	}
	m.Postgres = version
	var settings []string
	for _, name := range []string{"fsync", "synchronous_commit", "wal_sync_method", "commit_delay", "shared_buffers", "max_connections", "autovacuum"} {
		var v string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
			return m, err
		}
		settings = append(settings, name+"="+v)
	}
	m.Settings = strings.Join(settings, " ")
	return m, nil
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// Print writes the table, the machine line and any plans.
func (rep *Report) Print(w io.Writer) error {
	o := rep.Options
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "postbox bench, %s (took %s)\n", rep.Started.UTC().Format("2006-01-02 15:04 MST"), rep.Elapsed.Round(time.Second))
	fmt.Fprintf(bw, "machine: %s\n", rep.Machine)
	if rep.Pool != nil {
		fmt.Fprintf(bw, "run: real processes (worker run, River peer), one SMTP sink port per replica; %s; database %s\n\n", rep.Pool, rep.Database)
	} else {
		fmt.Fprintf(bw, "run: N=%d, %d email trial(s), pool=%d conns per path, %d application goroutines, postbox drain concurrency=%d batches, River peer MaxWorkers=%d, body=%d B, database %s\n\n",
			o.N, o.Trials, o.PoolSize, o.Clients, o.Concurrency, o.PeerWorkers, o.BodyBytes, rep.Database)
	}
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SECTION\tPATH\tFIGURE\tUNIT\tNOTES")
	for _, r := range rep.sorted() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Section, r.Path, r.Figure, r.Unit, r.Notes)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, e := range rep.Explains {
		fmt.Fprintf(bw, "\n-- %s\n%s\n\n%s\n", e.Name, e.SQL, e.Plan)
	}
	return bw.Flush()
}

// sectionOrder is the order sections print in; rows keep their order
// within a section.
var sectionOrder = []string{"email drain", "enqueue", "latency commit→DATA", "webhook fan-out", "ceiling",
	titlePoolBacklog, titlePoolLatency, titlePoolEnqueue, titlePoolKill}

func (rep *Report) sorted() []Row {
	rows := slices.Clone(rep.Rows)
	rank := func(s string) int {
		if i := slices.Index(sectionOrder, s); i >= 0 {
			return i
		}
		return len(sectionOrder)
	}
	slices.SortStableFunc(rows, func(a, b Row) int { return rank(a.Section) - rank(b.Section) })
	return rows
}

// Find returns the first row of section whose path starts with path.
func (rep *Report) Find(section, path string) (Row, bool) {
	for _, r := range rep.Rows {
		if r.Section == section && strings.HasPrefix(r.Path, path) {
			return r, true
		}
	}
	return Row{}, false
}

func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func fmtRate(v float64) string { return fmt.Sprintf("%.0f", v) }

func fmtMs(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms >= 100:
		return fmt.Sprintf("%.0f", ms)
	case ms >= 10:
		return fmt.Sprintf("%.1f", ms)
	default:
		return fmt.Sprintf("%.2f", ms)
	}
}
