package pgserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
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
// package or its sibling devservers start.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
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
