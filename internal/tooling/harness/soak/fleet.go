package soak

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/postbox/postbox/internal/operator/devserver/pgserver"
)

// proc is one worker process.
type proc struct {
	slot, gen int
	pid       int
	addr      string // HTTP_ADDR
	started   time.Time
	logPath   string
	ready     bool // its HTTP server answered once: River may be running; guarded by fleet.mu
	cmd       *exec.Cmd
	done      chan struct{} // closed once Wait returned
	exitErr   error
	killed    bool // by the soak (kill -9 or the final stop); guarded by fleet.mu
	reaped    bool // its exit on its own is recorded; guarded by fleet.mu
}

// Crash is a worker process that died without being asked to stop: a
// kill -9 by the soak, or an exit on its own.
type Crash struct {
	At     time.Time
	PID    int
	Slot   int
	Killed bool   // kill -9 by the soak; false: it exited by itself
	Status string // how it ended
	// Running: the worker was serving HTTP when it died, so River may have
	// been running and holding rows. A worker that dies before that — one
	// killed while booting, or one that exits because Postgres is down at
	// boot — cannot have claimed anything, so it explains no duplicate.
	Running bool
}

// probe reports whether p's HTTP server has answered, trying once more if
// it has not yet. The server listens before River starts, so a worker that
// never answered has claimed nothing.
func (p *proc) probe() bool {
	if !p.ready {
		if c, err := net.DialTimeout("tcp", p.addr, 100*time.Millisecond); err == nil {
			c.Close()
			p.ready = true
		}
	}
	return p.ready
}

// fleet keeps Workers worker processes running: one per slot, replaced
// when killed or when it exits.
type fleet struct {
	bin    string
	env    []string
	dir    string
	logger func(format string, args ...any)

	mu          sync.Mutex
	lastBootLog time.Time
	current     []*proc
	all         []*proc
	crashes     []Crash
	stopped     bool

	watchStop chan struct{}
	watchDone chan struct{}
}

func newFleet(bin string, env []string, dir string, n int, logf func(string, ...any)) *fleet {
	return &fleet{bin: bin, env: env, dir: dir, logger: logf, current: make([]*proc, n),
		watchStop: make(chan struct{}), watchDone: make(chan struct{})}
}

// start spawns every slot's first process and a watcher that replaces any
// process that exits by itself.
func (f *fleet) start() error {
	go f.watch()
	f.mu.Lock()
	defer f.mu.Unlock()
	for slot := range f.current {
		if err := f.spawnLocked(slot); err != nil {
			return err
		}
	}
	return nil
}

// spawnLocked starts slot's next process. Each gets its own free HTTP port
// and log file.
func (f *fleet) spawnLocked(slot int) error {
	gen := 0
	if old := f.current[slot]; old != nil {
		gen = old.gen + 1
	}
	addr, err := pgserver.FreeAddr()
	if err != nil {
		return err
	}
	path := filepath.Join(f.dir, fmt.Sprintf("worker-%d-%03d.log", slot, gen))
	log, err := os.Create(path)
	if err != nil {
		return err
	}
	cmd := exec.Command(f.bin, "run")
	cmd.Env = append(append([]string(nil), f.env...), "HTTP_ADDR="+addr)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start worker: %w", err)
	}
	p := &proc{slot: slot, gen: gen, pid: cmd.Process.Pid, addr: addr, started: time.Now(), logPath: path,
		cmd: cmd, done: make(chan struct{})}
	go func() {
		p.exitErr = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	f.current[slot] = p
	f.all = append(f.all, p)
	return nil
}

// watch replaces processes that exit by themselves (a worker that cannot
// reach Postgres at boot exits 1, for instance), recording each as a crash.
func (f *fleet) watch() {
	defer close(f.watchDone)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-f.watchStop:
			return
		case <-tick.C:
		}
		f.mu.Lock()
		for slot, p := range f.current {
			if f.stopped {
				break
			}
			if p == nil {
				continue
			}
			select {
			case <-p.done:
			default:
				p.probe()
				continue
			}
			if p.killed {
				continue // a kill respawns its own slot
			}
			if !p.reaped {
				p.reaped = true
				// A worker boots in well under a second; one that lived
				// longer may have been running even if no probe caught it
				// serving.
				running := p.ready || time.Since(p.started) > 2*time.Second
				f.crashes = append(f.crashes, Crash{At: time.Now(), PID: p.pid, Slot: slot, Status: exitStatus(p.exitErr), Running: running})
				if running || time.Since(f.lastBootLog) > 5*time.Second {
					f.logger("worker slot %d pid %d exited by itself (%s, running: %v); replacing it", slot, p.pid, exitStatus(p.exitErr), running)
					if !running {
						f.lastBootLog = time.Now()
					}
				}
			}
			// Until this succeeds the slot keeps its reaped process, and
			// the next tick tries again.
			if err := f.spawnLocked(slot); err != nil {
				f.logger("replace worker slot %d: %v (retrying)", slot, err)
			}
		}
		f.mu.Unlock()
	}
}

// kill kill -9s the process in slot, waits for it to be gone, and
// starts its replacement.
func (f *fleet) kill(slot int) (Crash, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.current[slot]
	p.killed = true
	running := p.probe()
	at := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return Crash{}, fmt.Errorf("kill -9 worker %d: %w", p.pid, err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		return Crash{}, fmt.Errorf("worker %d still running 10 s after kill -9", p.pid)
	}
	c := Crash{At: at, PID: p.pid, Slot: slot, Killed: true, Status: exitStatus(p.exitErr), Running: running}
	f.crashes = append(f.crashes, c)
	return c, f.spawnLocked(slot)
}

// stop ends every process: SIGTERM and up to grace for a clean exit, then
// SIGKILL. It is safe to call more than once; the watcher is stopped first
// so nothing is respawned.
func (f *fleet) stop(grace time.Duration) (unclean []string) {
	f.mu.Lock()
	if !f.stopped {
		f.stopped = true
		close(f.watchStop)
	}
	live := []*proc{}
	for _, p := range f.all {
		select {
		case <-p.done:
		default:
			p.killed = true
			live = append(live, p)
		}
	}
	f.mu.Unlock()
	<-f.watchDone

	for _, p := range live {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	expired := false
	for _, p := range live {
		var wait <-chan time.Time = timer.C
		if expired {
			wait = closedTime
		}
		select {
		case <-p.done:
			if p.exitErr != nil {
				unclean = append(unclean, fmt.Sprintf("worker %d: %s after SIGTERM (log %s)", p.pid, exitStatus(p.exitErr), p.logPath))
			}
			continue
		case <-wait:
			expired = true
		}
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		unclean = append(unclean, fmt.Sprintf("worker %d: still running %s after SIGTERM; killed (log %s)", p.pid, grace, p.logPath))
	}
	return unclean
}

// slotOf returns the slot whose current process has pid, or -1.
func (f *fleet) slotOf(pid int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.current {
		if p != nil && p.pid == pid {
			return p.slot
		}
	}
	return -1
}

// snapshot returns the crashes so far and every process started.
func (f *fleet) snapshot() ([]Crash, []*proc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Crash(nil), f.crashes...), append([]*proc(nil), f.all...)
}

// closedTime is always ready: once the grace period is over, waiting for
// the next process is only a check.
var closedTime = func() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

func exitStatus(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "signal " + ws.Signal().String()
		}
		return fmt.Sprintf("exit %d", ee.ExitCode())
	}
	if err != nil {
		return err.Error()
	}
	return "exit 0"
}
