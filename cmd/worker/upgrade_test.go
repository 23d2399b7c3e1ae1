package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/internal/tooling/harness/gobuild"
	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/logbuf"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// previousRelease is version N of the rolling-deploy test: the last
// release, before migrations 00015 (the email kind CHECK becomes a format
// rule), 00016 (status cancelled) and 00017 (declared secret keys). Each release moves it forward, to the release
// the new one replaces (docs/OPERATIONS.md, "Rolling deploy, and an older
// replica beside a newer schema").
const previousRelease = "ac7436ba6c1dcb68843aa4afb532d734adb24c54"

// previousWorkerBinary builds cmd/worker as it was at rev, from `git
// archive` of this checkout's history, with the same toolchain, module
// cache and build cache as the tree under test. Without the history (an
// exported tree, a shallow clone) it skips, and fails in CI, which must run
// it.
//
// A release never changes, so the binary is kept in the user's cache
// directory under its revision and toolchain, and built once per machine:
// built afresh in each run (and in each scratch tree of the mutation
// matrix) it took minutes of a cold machine, and on a busy one pushed the
// package past go test's ten-minute timeout.
func previousWorkerBinary(t *testing.T, rev string) string {
	t.Helper()
	cached := ""
	if dir, err := os.UserCacheDir(); err == nil {
		cached = filepath.Join(dir, "postbox-test", fmt.Sprintf("worker-%s-%s-%s", rev[:12], runtime.Version(), runtime.GOARCH))
		if info, err := os.Stat(cached); err == nil && info.Mode().IsRegular() {
			return cached
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := gobuild.ModuleRoot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	noHistory := func(why string) {
		t.Helper()
		how := fmt.Sprintf("the previous release %s cannot be built from git: %s (a full clone is needed)", rev, why)
		if os.Getenv("CI") != "" {
			t.Fatal(how)
		}
		t.Skip(how)
	}
	if _, err := exec.LookPath("git"); err != nil {
		noHistory("no git on PATH")
	}
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		noHistory("no .git in " + root)
	}
	if out, err := exec.CommandContext(ctx, "git", "-C", root, "cat-file", "-e", rev+"^{commit}").CombinedOutput(); err != nil {
		noHistory(fmt.Sprintf("git cat-file -e: %v %s", err, strings.TrimSpace(string(out))))
	}

	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(dir, "src.tar")
	for _, args := range [][]string{
		{"git", "-C", root, "archive", "--format=tar", "-o", tarball, rev},
		{"tar", "-x", "-f", tarball, "-C", src},
	} {
		if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// -trimpath keys the build cache by module paths, not by this temporary
	// directory, so a second run links from the cache. The binary goes into
	// the cache by a rename within its directory, so that a parallel run
	// never executes a half-written one; without a cache it stays here.
	bin := filepath.Join(dir, "worker-"+rev[:12])
	staged := false
	if cached != "" && os.MkdirAll(filepath.Dir(cached), 0o755) == nil {
		bin, staged = fmt.Sprintf("%s.%d-%d", cached, os.Getpid(), time.Now().UnixNano()), true
	}
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./cmd/worker")
	build.Dir = src
	build.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/worker at %s: %v\n%s", rev, err, out)
	}
	if staged && os.Rename(bin, cached) == nil {
		return cached
	}
	return bin
}

// startBinary is startWorker for a given worker binary, with its output in
// a buffer that is safe to read while the process runs.
func startBinary(t *testing.T, bin string, env []string, args ...string) (*exec.Cmd, *logbuf.Buffer) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out := new(logbuf.Buffer)
	cmd.Stderr = out
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			// A test that failed while its own goroutine waited for the
			// process may still be in that Wait; a second one beside it
			// can block for ever, so this one is bounded.
			waited := make(chan struct{})
			go func() { cmd.Wait(); close(waited) }()
			select {
			case <-waited:
			case <-time.After(10 * time.Second):
			}
		}
	})
	return cmd, out
}

// runBinary runs a one-shot worker command to its end (two minutes at
// most) and returns its exit code and output.
func runBinary(t *testing.T, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("worker %s did not finish within 2 minutes:\n%s", strings.Join(args, " "), out)
	}
	if exit := new(exec.ExitError); err != nil && !errors.As(err, &exit) {
		t.Fatalf("worker %s: %v", strings.Join(args, " "), err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// envValue is the value of name in env, a list of NAME=value.
func envValue(env []string, name string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// schemaVersions parses `worker migrate status`: the postbox schema's
// version in the database and the one the binary knows.
func schemaVersions(t *testing.T, status string) (current, target int) {
	t.Helper()
	for _, line := range strings.Split(status, "\n") {
		if _, err := fmt.Sscanf(strings.TrimSpace(line), "postbox schema %d of %d", &current, &target); err == nil {
			return current, target
		}
	}
	t.Fatalf("no postbox schema line in migrate status:\n%s", status)
	return 0, 0
}

func queryInt(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var n int
	if err := pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func queryIDs(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows, err := pool.Query(ctx, sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

func execSQL(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := pool.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// insertBuiltinEmails enqueues n emails by plain SQL, cycling through the
// four built-in kinds (the previous release knows no others), each with
// the keys its template needs — the secret links included, which the sent
// mark must scrub. With due set, the rows are due then; else now.
func insertBuiltinEmails(t *testing.T, pool *pgxpool.Pool, prefix string, n int, due string) []string {
	t.Helper()
	if due == "" {
		due = "now()"
	}
	return queryIDs(t, pool, `INSERT INTO email_outbox (kind, customer_id, payload, next_attempt_at)
		SELECT k.kind, 'cus_' || i,
			jsonb_build_object('to', 'user' || i || '@example.com', 'subject', $1 || ' ' || i, 'text', 'hello') ||
			CASE k.kind
				WHEN 'invoice' THEN jsonb_build_object('invoice_number', 'INV-' || i, 'amount_due', '€12.00')
				WHEN 'password_reset' THEN jsonb_build_object('password_reset_url', 'https://app.example.com/reset/' || i)
				WHEN 'member_invite' THEN jsonb_build_object('invite_url', 'https://app.example.com/invite/' || i, 'org_name', 'Acme')
				ELSE '{}'::jsonb
			END,
			`+due+`
		FROM generate_series(1, $2) AS i,
			LATERAL (SELECT (ARRAY['raw', 'invoice', 'password_reset', 'member_invite'])[1 + i % 4] AS kind) AS k
		RETURNING id::text`, prefix, n)
}

// TestUpgrade_PreviousReplicaBesideCurrentOnNewSchema checks the rolling
// deploy of docs/OPERATIONS.md ("Rolling deploy, and an older replica
// beside a newer schema") with real processes: the database is migrated
// by this tree (N+1), and a replica of the previous release (N, built from
// git) runs beside a replica of this tree, sending to one SMTP sink. Each
// replica has its own SMTP_FROM, so the sink tells who sent what.
//
//   - N's `migrate status` accepts the newer schema (exit 0), and N's
//     `worker run` boots and answers /readyz on it.
//   - A backlog of the built-in kinds inserted by plain SQL is delivered
//     exactly once — one message per row at the sink, one sent attempt
//     per row, every row dispatched with its secret links scrubbed — and
//     both replicas delivered some of it.
//   - Rows scheduled for later and cancelled with N+1's `worker cancel`
//     while N runs are never claimed by N: with N+1 stopped, they are
//     made due beside rows that are not cancelled, which N sends, and stay
//     cancelled, unsent, with no attempt logged. A cancelled
//     webhook_outbox row is likewise never fanned out by N.
func TestUpgrade_PreviousReplicaBesideCurrentOnNewSchema(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the previous release's worker and runs two worker processes")
	}
	t.Parallel()
	prevBin := previousWorkerBinary(t, previousRelease)
	curBin := workerBinary(t)
	url := pgtest.URL(t)
	pool := pgtest.Connect(t, url)
	dbEnv := []string{"DATABASE_URL=" + url, "LOG_LEVEL=warn"}

	// The database is at this tree's schema, ahead of N's.
	code, curStatus := runBinary(t, curBin, dbEnv, "migrate", "status")
	if code != 0 {
		t.Fatalf("N+1 migrate status: exit %d\n%s", code, curStatus)
	}
	dbVersion, curTarget := schemaVersions(t, curStatus)
	if dbVersion != curTarget || curTarget < 16 {
		t.Fatalf("database at postbox schema %d, N+1 knows %d: want both at least 16 (cancelled)\n%s", dbVersion, curTarget, curStatus)
	}
	code, prevStatus := runBinary(t, prevBin, dbEnv, "migrate", "status")
	prevDB, prevTarget := schemaVersions(t, prevStatus)
	t.Logf("N (%s) migrate status, exit %d:\n%s", previousRelease[:7], code, prevStatus)
	if prevDB != dbVersion || prevTarget >= curTarget {
		t.Fatalf("N sees schema %d of %d; want %d of fewer than %d: is %s really the previous release?", prevDB, prevTarget, dbVersion, curTarget, previousRelease)
	}
	if code != 0 {
		t.Fatalf("N's migrate status exits %d on the newer schema: N would refuse it\n%s", code, prevStatus)
	}

	sink, err := smtpsink.Start(smtpsink.Options{DiscardData: true, Fault: func(smtpsink.Envelope) error {
		time.Sleep(20 * time.Millisecond) // simulates: a relay answering in 20 ms (the relay, not the machine, is the bound: both replicas get rows)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	const (
		prevFrom = "previous@postbox.test"
		curFrom  = "current@postbox.test"
	)
	prevEnv := append(poolEnv(t, url, sink), "EMAIL_CONCURRENCY=2", "SMTP_FROM="+prevFrom)
	curEnv := append(poolEnv(t, url, sink), "EMAIL_CONCURRENCY=2", "SMTP_FROM="+curFrom)
	prev, prevOut := startBinary(t, prevBin, prevEnv, "run")
	cur, curOut := startBinary(t, curBin, curEnv, "run")
	logs := func() string {
		return fmt.Sprintf("--- N (%s)\n%s\n--- N+1\n%s", previousRelease[:7], prevOut, curOut)
	}
	for _, env := range [][]string{prevEnv, curEnv} {
		base := "http://" + envValue(env, "HTTP_ADDR")
		eventually.Explain(t, base+"/readyz answers 200", 2*time.Minute, func() bool {
			code, _ := get(t, base+"/readyz")
			return code == http.StatusOK
		}, logs)
	}
	waitShifts(t, pool, 2, logs)

	// Both replicas drain one backlog, each row once.
	const backlog = 300
	ids := insertBuiltinEmails(t, pool, "rolling", backlog, "")
	waitEmails(t, pool, 3*time.Minute, logs)
	byRow := sink.CountByRowID()
	for _, id := range ids {
		if c := byRow[id]; c != 1 {
			t.Errorf("row %s reached the relay %d times, want once", id, c)
		}
	}
	if len(byRow) != backlog {
		t.Errorf("the relay saw %d distinct rows, want %d", len(byRow), backlog)
	}
	if n := countStatus(t, pool, "dispatched"); n != backlog {
		t.Errorf("%d rows dispatched, want %d (failed %d, skipped %d)", n, backlog,
			countStatus(t, pool, "failed"), countStatus(t, pool, "skipped"))
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM email_attempts WHERE outcome <> 'sent'`); n != 0 {
		t.Errorf("%d attempts that are not sent: a row was retried, failed or skipped", n)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM email_outbox o WHERE
		(SELECT count(*) FROM email_attempts a WHERE a.row_id = o.id AND a.outcome = 'sent') <> 1`); n != 0 {
		t.Errorf("%d rows without exactly one sent attempt", n)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM email_outbox
		WHERE payload ?| ARRAY['password_reset_url', 'invite_url'] OR scrubbed_keys IS NULL`); n != 0 {
		t.Errorf("%d dispatched rows kept a secret link or have no scrub record", n)
	}
	sentBy := map[string]int{}
	for _, m := range sink.Messages() {
		sentBy[m.From]++
	}
	t.Logf("backlog of %d: N sent %d, N+1 sent %d", backlog, sentBy[prevFrom], sentBy[curFrom])
	if sentBy[prevFrom] == 0 || sentBy[curFrom] == 0 {
		t.Fatalf("N sent %d and N+1 sent %d of the backlog: both must take part for the test to show anything; logs:\n%s",
			sentBy[prevFrom], sentBy[curFrom], logs())
	}
	if sentBy[prevFrom]+sentBy[curFrom] != backlog {
		t.Errorf("messages from N and N+1 add up to %d, want %d (others: %v)", sentBy[prevFrom]+sentBy[curFrom], backlog, sentBy)
	}

	// Cancel with N+1 while N runs: scheduled rows, half of them cancelled.
	const scheduled = 20
	later := insertBuiltinEmails(t, pool, "scheduled", scheduled, "now() + interval '1 hour'")
	var cancelled, kept []string
	for i, id := range later {
		if i%2 == 1 {
			kept = append(kept, id)
			continue
		}
		if code, out := runBinary(t, curBin, dbEnv, "cancel", "email", id, "--by", "upgrade-test"); code != 0 {
			t.Fatalf("N+1 cancel email %s: exit %d\n%s", id, code, out)
		}
		cancelled = append(cancelled, id)
	}
	hooks := queryIDs(t, pool, `INSERT INTO webhook_outbox (event_type, payload, next_attempt_at)
		SELECT 'invoice.paid', jsonb_build_object('invoice_id', 'in_' || i), now() + interval '1 hour'
		FROM generate_series(1, 2) AS i RETURNING id::text`)
	if code, out := runBinary(t, curBin, dbEnv, "cancel", "webhook", hooks[0], "--by", "upgrade-test"); code != 0 {
		t.Fatalf("N+1 cancel webhook %s: exit %d\n%s", hooks[0], code, out)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM email_outbox WHERE id = ANY($1::uuid[]) AND status = 'cancelled'`, cancelled); n != len(cancelled) {
		t.Fatalf("%d of %d rows cancelled", n, len(cancelled))
	}

	// Only N is left, and every scheduled row falls due at once.
	stopWorker(t, cur, curOut)
	execSQL(t, pool, `UPDATE email_outbox SET next_attempt_at = now() WHERE id = ANY($1::uuid[])`, later)
	execSQL(t, pool, `UPDATE webhook_outbox SET next_attempt_at = now() WHERE id = ANY($1::uuid[])`, hooks)
	eventually.Explain(t, "N sends the scheduled rows that were not cancelled", 3*time.Minute, func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM email_outbox WHERE id = ANY($1::uuid[]) AND status = 'dispatched'`, kept) == len(kept)
	}, logs)
	eventually.Explain(t, "N fans out the webhook_outbox row that was not cancelled", 3*time.Minute, func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM webhook_outbox WHERE id = $1::uuid AND status = 'dispatched'`, hooks[1]) == 1
	}, logs)
	// One more claim after those: a row inserted now, sent by N.
	last := insertBuiltinEmails(t, pool, "last", 1, "")
	eventually.Explain(t, "N sends a row inserted after the cancelled ones fell due", 3*time.Minute, func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM email_outbox WHERE id = $1::uuid AND status = 'dispatched'`, last[0]) == 1
	}, logs)

	// Tenants (migration 00030): N fans out without looking at tenant_id,
	// so its fan-out of acme's event would reach globex's endpoint too.
	// The database refuses it: the row waits for its retry, and neither
	// endpoint is sent anything by N.
	var tenantHits atomic.Int32
	tenantHook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		tenantHits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer tenantHook.Close()
	execSQL(t, pool, `INSERT INTO webhook_endpoints (tenant_id, url, secret, event_types) VALUES
		('acme', $1 || '/acme', 'whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0', '{tenant.test}'),
		('globex', $1 || '/globex', 'whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0', '{tenant.test}')`, tenantHook.URL)
	acmeRow := queryIDs(t, pool, `INSERT INTO webhook_outbox (tenant_id, event_type, payload) VALUES ('acme', 'tenant.test', '{}') RETURNING id::text`)[0]
	eventually.Explain(t, "N's fan-out of acme's event is refused by webhook_deliveries_tenant_guard", 3*time.Minute, func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM webhook_outbox WHERE id = $1::uuid AND status = 'pending' AND attempts > 0
			AND last_error LIKE '%the endpoint belongs to another tenant%'`, acmeRow) == 1
	}, logs)
	if n := queryInt(t, pool, `SELECT count(*) FROM webhook_events WHERE outbox_id = $1::uuid`, acmeRow); n != 0 || tenantHits.Load() != 0 {
		t.Errorf("N's refused fan-out of acme's event left %d events and sent %d requests", n, tenantHits.Load())
	}

	byRow = sink.CountByRowID()
	fromOf := map[string]string{}
	for _, m := range sink.Messages() {
		fromOf[m.RowID] = m.From
	}
	for _, id := range append(kept, last...) {
		if c, from := byRow[id], fromOf[id]; c != 1 || from != prevFrom {
			t.Errorf("row %s reached the relay %d times, last from %q; want once from N", id, c, from)
		}
	}
	for _, id := range cancelled {
		if c := byRow[id]; c != 0 {
			t.Errorf("cancelled row %s reached the relay %d times", id, c)
		}
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM email_outbox
		WHERE id = ANY($1::uuid[]) AND status = 'cancelled' AND attempts = 0 AND cancelled_by = 'upgrade-test'`, cancelled); n != len(cancelled) {
		t.Errorf("%d of %d cancelled rows are still cancelled by upgrade-test and were never claimed (attempts 0)", n, len(cancelled))
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM email_attempts WHERE row_id = ANY($1::uuid[])`, cancelled); n != 0 {
		t.Errorf("%d attempts logged for cancelled rows", n)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM webhook_outbox WHERE id = $1::uuid AND status = 'cancelled' AND attempts = 0`, hooks[0]); n != 1 {
		t.Errorf("the cancelled webhook_outbox row is no longer cancelled and unclaimed")
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM webhook_events WHERE outbox_id = $1::uuid`, hooks[0]); n != 0 {
		t.Errorf("the cancelled webhook_outbox row was fanned out into %d events", n)
	}

	stopWorker(t, prev, prevOut)
	for _, line := range strings.Split(prevOut.String(), "\n") {
		if strings.Contains(line, `"level":"ERROR"`) {
			t.Errorf("N logged an error on the newer schema: %s", line)
		}
	}
	if t.Failed() {
		t.Logf("logs:\n%s", logs())
	}
}
