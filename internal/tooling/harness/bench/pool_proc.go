package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/tooling/harness/gobuild"
)

// binaries are the programs the pool sections run: the real worker and
// the River peer, built once per run.
type binaries struct {
	dir    string
	worker string
	peer   string
}

// build compiles ./cmd/worker and the River peer into dir.
func build(ctx context.Context, dir string) (binaries, error) {
	b := binaries{dir: dir, worker: filepath.Join(dir, "worker"), peer: filepath.Join(dir, "riverpeer")}
	return b, gobuild.Build(ctx, dir, "./cmd/worker", "./internal/tooling/cmd/riverpeer")
}

// proc is one started process: a `worker run` replica or a River peer.
type proc struct {
	name      string
	cmd       *exec.Cmd
	log       string // its stdout and stderr
	httpAddr  string // worker: where /readyz answers
	readyFile string // peer: created once its client runs
	exited    chan struct{}
	waitErr   error
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// baseEnv is what every process inherits: enough to run, nothing that
// configures the worker behind the bench's back.
func baseEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "TZ"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

func startProc(name, bin, logPath string, env []string, args ...string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Env = append(baseEnv(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() { p.waitErr = cmd.Wait(); close(p.exited) }()
	return p, nil
}

func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill9 kills the process without a chance to clean up, and reaps it.
func (p *proc) kill9() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// anyExited names the first of procs that no longer runs, with its log's
// end, as an error of label; nil while every one runs.
func anyExited(label string, procs []*proc) error {
	for _, p := range procs {
		if !p.alive() {
			return fmt.Errorf("%s: %s exited (%v)\n%s", label, p.name, p.waitErr, p.tail())
		}
	}
	return nil
}

// tail is the end of the process's log, for an error message.
func (p *proc) tail() string {
	data, _ := os.ReadFile(p.log)
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return fmt.Sprintf("--- %s (pid %d, log %s)\n%s", p.name, p.pid(), p.log, data)
}

// stopAll sends SIGTERM to every process still running, waits up to
// grace, then SIGKILLs what is left.
func stopAll(procs []*proc, grace time.Duration) {
	for _, p := range procs {
		if p.alive() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.After(grace)
	for _, p := range procs {
		select {
		case <-p.exited:
		case <-deadline:
		}
	}
	for _, p := range procs {
		if p.alive() {
			p.kill9()
		}
	}
}

// waitReady waits until every process serves: /readyz answers 200 for a
// worker, the ready file exists for a peer. A process that exits fails it.
func waitReady(ctx context.Context, procs []*proc, limit time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(limit)
	for _, p := range procs {
		for {
			if !p.alive() {
				return fmt.Errorf("%s exited before it was ready (%v)\n%s", p.name, p.waitErr, p.tail())
			}
			if p.ready(ctx, client) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not ready after %s\n%s", p.name, limit, p.tail())
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

func (p *proc) ready(ctx context.Context, client *http.Client) bool {
	if p.readyFile != "" {
		_, err := os.Stat(p.readyFile)
		return err == nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.httpAddr+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// leader waits for a River leader and returns the process it is. River's
// client ID is <hostname>-<pid> in `worker run` and in the peer.
func leader(ctx context.Context, db *pgx.Conn, procs []*proc, limit time.Duration) (*proc, error) {
	deadline := time.Now().Add(limit)
	for {
		var id string
		err := db.QueryRow(ctx, `SELECT leader_id FROM river_leader LIMIT 1`).Scan(&id)
		if err == nil {
			for _, p := range procs {
				if strings.HasSuffix(id, "-"+strconv.Itoa(p.pid())) {
					return p, nil
				}
			}
			return nil, fmt.Errorf("the River leader %q is none of the started processes", id)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("river_leader: %w", err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no River leader elected within %s", limit)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
