package pgserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Cluster is a throwaway Postgres cluster in a temp dir.
type Cluster struct {
	URL    string
	dir    string
	bindir string
	cred   *syscall.Credential
	logger *slog.Logger
}

// ErrNoBinaries means no initdb/pg_ctl could be found.
var ErrNoBinaries = errors.New("no Postgres server binaries (initdb, pg_ctl) found")

// BinDir finds the directory holding initdb and pg_ctl: $PG_BINDIR, then
// PATH, then the Debian layout /usr/lib/postgresql/<newest>/bin.
func BinDir() (string, error) {
	if dir := os.Getenv("PG_BINDIR"); dir != "" {
		return dir, nil
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Dir(real), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", ErrNoBinaries
}

func version(bindir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(bindir)))
	return n
}

// StartCluster runs initdb and pg_ctl start on a free loopback port. Tuned
// for tests: fsync off, trust auth, loopback only.
func StartCluster(ctx context.Context, logger *slog.Logger) (*Cluster, error) {
	bindir, err := BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "postbox-pg-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, bindir: bindir, logger: logger}
	if os.Geteuid() == 0 {
		if c.cred, err = postgresUser(dir); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	port, err := FreePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := c.run(ctx, "initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200", port, dir)
	if err := c.run(ctx, "pg_ctl", "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "-t", "60", "start"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	logger.InfoContext(ctx, "throwaway Postgres started", "dir", dir, "port", port)
	return c, nil
}

// Stop shuts the cluster down immediately and removes its files.
func (c *Cluster) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.run(ctx, "pg_ctl", "-D", filepath.Join(c.dir, "data"), "-m", "immediate", "-w", "stop")
	if rmErr := os.RemoveAll(c.dir); err == nil {
		err = rmErr
	}
	c.logger.Info("throwaway Postgres stopped", "dir", c.dir)
	return err
}

func (c *Cluster) run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bindir, name), args...)
	cmd.Dir = c.dir
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, out)
	}
	return nil
}

// postgresUser returns the credentials of the postgres OS user and hands
// dir to it: initdb refuses to run as root.
func postgresUser(dir string) (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs a postgres OS user to own the cluster: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// FreePort is a loopback TCP port free a moment ago, for a server this
// package, its sibling devservers or a test harness start. It is drawn
// below the kernel's ephemeral range (ip_local_port_range), where
// listeners on port 0 and every outgoing connection take theirs: from
// that range another process could take it between this check and the
// server's bind, as a bench's worker once found under a busy test run.
func FreePort() (int, error) {
	if low := ephemeralLow(); low > firstPort+1000 {
		for range 100 {
			port := firstPort + rand.IntN(low-firstPort)
			if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
				l.Close()
				return port, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreeAddr is FreePort as a loopback address, host:port.
func FreeAddr() (string, error) {
	port, err := FreePort()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(port), nil
}

// firstPort is the lowest port FreePort draws: above the well-known
// services a machine may run.
const firstPort = 20000

// ephemeralLow is the first port of the kernel's ephemeral range, or 0
// where it cannot be read (the range is then not avoided).
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return 0
	}
	low, _ := strconv.Atoi(fields[0])
	return low
}

// Restart stops the cluster in fast mode — sessions are terminated, as in
// a real restart or failover — and starts it again with the command line it
// was started with (pg_ctl keeps it in postmaster.opts): same port, socket
// directory and settings. The soak uses it to prove a database restart
// loses nothing.
func (c *Cluster) Restart(ctx context.Context) error {
	// -l is needed: without it the server inherits pg_ctl's output and
	// holds it open forever.
	return c.run(ctx, "pg_ctl", "restart", "-D", filepath.Join(c.dir, "data"), "-m", "fast", "-w", "-t", "60",
		"-l", filepath.Join(c.dir, "log"))
}
