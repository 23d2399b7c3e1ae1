package pgbouncer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postbox/postbox/internal/operator/devserver/pgserver"
)

// ErrNotFound means no pgbouncer binary was found.
var ErrNotFound = errors.New("pgbouncer not found (PGBOUNCER_BIN, PATH, /usr/sbin/pgbouncer); install it with: apt-get install pgbouncer")

// debianPath is where Debian's package puts the binary, outside a
// non-root PATH.
const debianPath = "/usr/sbin/pgbouncer"

// Find returns the pgbouncer binary: PGBOUNCER_BIN, then PATH, then
// /usr/sbin/pgbouncer.
func Find() (string, error) {
	if p := os.Getenv("PGBOUNCER_BIN"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if fi, err := os.Stat(debianPath); err == nil && !fi.IsDir() {
		return debianPath, nil
	}
	return "", ErrNotFound
}

// Options configure Start. Bin, Dir and Upstream are required.
type Options struct {
	Bin string
	// Dir receives pgbouncer.ini and userlist.txt; it must exist, and
	// outlive the Bouncer.
	Dir string
	// Upstream is a Postgres URL: PgBouncer connects to its host and port
	// as whichever user a client names, with its password when it has
	// one, to the database the client names.
	Upstream string
	// PoolMode is PgBouncer's pool_mode; "" is transaction.
	PoolMode string
	// DefaultPoolSize is the server connections per database and user;
	// 0 is 8, fewer than a replica's pool, so that clients truly share
	// them.
	DefaultPoolSize int
	// MaxClientConn is how many clients it takes at once; 0 is 200.
	MaxClientConn int
}

// Bouncer is a running PgBouncer on 127.0.0.1.
type Bouncer struct {
	Port   int
	user   string // the upstream's user: the admin console's
	cmd    *exec.Cmd
	exited chan struct{}
	output *buffer
	once   sync.Once
}

// startAttempts bounds the retries of a start whose port another process
// took between our probe and PgBouncer's bind.
const startAttempts = 3

// Start runs PgBouncer until Close.
func Start(ctx context.Context, o Options) (*Bouncer, error) {
	up, err := pgconn.ParseConfig(o.Upstream)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: upstream: %w", err)
	}
	if o.PoolMode == "" {
		o.PoolMode = "transaction"
	}
	if o.DefaultPoolSize <= 0 {
		o.DefaultPoolSize = 8
	}
	if o.MaxClientConn <= 0 {
		o.MaxClientConn = 200
	}
	runAs := ""
	if os.Geteuid() == 0 {
		if runAs, err = unprivilegedUser(); err != nil {
			return nil, err
		}
	}
	users := filepath.Join(o.Dir, "userlist.txt")
	if err := os.WriteFile(users, []byte(quote(up.User)+" "+quote(up.Password)+"\n"), 0o600); err != nil {
		return nil, err
	}
	var lastErr error
	for range startAttempts {
		port, err := pgserver.FreePort()
		if err != nil {
			return nil, err
		}
		ini := filepath.Join(o.Dir, "pgbouncer.ini")
		if err := os.WriteFile(ini, []byte(config(o, up, users, port, runAs)), 0o600); err != nil {
			return nil, err
		}
		b := &Bouncer{Port: port, user: up.User, exited: make(chan struct{}), output: &buffer{}}
		b.cmd = exec.Command(o.Bin, ini)
		b.cmd.Stdout, b.cmd.Stderr = b.output, b.output
		if err := b.cmd.Start(); err != nil {
			return nil, fmt.Errorf("pgbouncer: start %s: %w", o.Bin, err)
		}
		go func() { _ = b.cmd.Wait(); close(b.exited) }()
		if lastErr = b.waitListening(ctx); lastErr == nil {
			return b, nil
		}
		b.Close()
	}
	return nil, lastErr
}

// config is pgbouncer.ini: every database of the upstream's server, by
// the name a client asks for, pooled in o.PoolMode, and quiet.
func config(o Options, up *pgconn.Config, users string, port int, runAs string) string {
	var b strings.Builder
	b.WriteString("[databases]\n")
	fmt.Fprintf(&b, "* = host=%s port=%d\n", up.Host, up.Port)
	b.WriteString("[pgbouncer]\n")
	for _, kv := range [][2]string{
		{"listen_addr", "127.0.0.1"},
		{"listen_port", strconv.Itoa(port)},
		{"unix_socket_dir", ""},
		{"auth_type", "trust"},
		{"auth_file", users},
		{"admin_users", up.User},
		{"pool_mode", o.PoolMode},
		{"default_pool_size", strconv.Itoa(o.DefaultPoolSize)},
		{"max_client_conn", strconv.Itoa(o.MaxClientConn)},
		{"log_connections", "0"},
		{"log_disconnections", "0"},
		{"log_stats", "0"},
		{"user", runAs},
	} {
		if kv[0] == "user" && kv[1] == "" {
			continue
		}
		fmt.Fprintf(&b, "%s = %s\n", kv[0], kv[1])
	}
	return b.String()
}

// quote is a userlist.txt field.
func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// unprivilegedUser is who PgBouncer becomes when started as root, which
// it otherwise refuses: postgres, as the throwaway cluster runs, else
// nobody.
func unprivilegedUser() (string, error) {
	for _, name := range []string{"postgres", "nobody"} {
		if _, err := user.Lookup(name); err == nil {
			return name, nil
		}
	}
	return "", errors.New("pgbouncer: running as root needs a postgres or nobody OS user for PgBouncer to switch to")
}

// waitListening waits until the port takes connections, or PgBouncer
// exits (its port was taken, its configuration refused).
func (b *Bouncer) waitListening(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	addr := "127.0.0.1:" + strconv.Itoa(b.Port)
	for {
		select {
		case <-b.exited:
			return fmt.Errorf("pgbouncer exited at start: %s", strings.TrimSpace(b.Output()))
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgbouncer not listening on %s after 30 s: %s", addr, strings.TrimSpace(b.Output()))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// URL is databaseURL (a postgres:// URL) through the bouncer: the same
// user, password, database and parameters, at its address.
func (b *Bouncer) URL(databaseURL string) (string, error) {
	u, err := url.Parse(databaseURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("pgbouncer: want a postgres:// URL to route through the bouncer")
	}
	u.Host = "127.0.0.1:" + strconv.Itoa(b.Port)
	return u.String(), nil
}

// Pool is one line of SHOW POOLS: a database and user's clients and the
// server connections PgBouncer holds for them.
type Pool struct {
	Database, User string
	ClientsActive  int // linked to a server connection, or idle between transactions
	ClientsWaiting int // waiting for a server connection
	ServersActive  int // linked to a client
	ServersIdle    int
	ServersUsed    int // back from a client, not yet checked
}

// Pools reads SHOW POOLS on the admin console.
func (b *Bouncer) Pools(ctx context.Context) ([]Pool, error) {
	cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://%s@127.0.0.1:%d/pgbouncer?sslmode=disable", url.PathEscape(b.user), b.Port))
	if err != nil {
		return nil, err
	}
	// The admin console speaks the simple protocol only.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer admin console: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, "SHOW POOLS")
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: SHOW POOLS: %w", err)
	}
	defer rows.Close()
	var out []Pool
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		col := map[string]any{}
		for i, f := range rows.FieldDescriptions() {
			col[f.Name] = vals[i]
		}
		out = append(out, Pool{Database: text(col["database"]), User: text(col["user"]),
			ClientsActive: number(col["cl_active"]), ClientsWaiting: number(col["cl_waiting"]),
			ServersActive: number(col["sv_active"]), ServersIdle: number(col["sv_idle"]), ServersUsed: number(col["sv_used"])})
	}
	return out, rows.Err()
}

func text(v any) string { return fmt.Sprint(v) }

func number(v any) int {
	n, _ := strconv.Atoi(fmt.Sprint(v))
	return n
}

// Output is what PgBouncer logged.
func (b *Bouncer) Output() string { return b.output.String() }

// Close stops PgBouncer at once (SIGTERM: its clients are cut) and waits
// for it to exit.
func (b *Bouncer) Close() {
	b.once.Do(func() {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.exited:
		case <-time.After(5 * time.Second):
			_ = b.cmd.Process.Kill()
			<-b.exited
		}
	})
}

// buffer is PgBouncer's output, written by the process's pipe and read
// by callers.
type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
