package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/textproto"
	"net/url"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/internal/tooling/pgbouncer"
	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/logbuf"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgbouncertest"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/webhook"
)

// directAppName marks the replicas' connections to DATABASE_DIRECT_URL in
// pg_stat_activity, so a test can tell them from PgBouncer's.
const directAppName = "postbox_direct_test"

// pooledEnv is a replica's environment behind the pooler at pooled, in
// transaction mode, with DATABASE_DIRECT_URL when direct is not empty.
func pooledEnv(t *testing.T, pooled, direct string, sink *smtpsink.Sink) []string {
	env := []string{
		"DATABASE_URL=" + pooled, "DATABASE_POOL_MODE=transaction", "HTTP_ADDR=" + freeAddr(t),
		"SMTP_HOST=127.0.0.1", "SMTP_PORT=" + strconv.Itoa(sink.Port()), "SMTP_TLS=none",
		"WEBHOOK_ALLOWED_CIDRS=127.0.0.0/8", "POLL_INTERVAL=200ms", "SHUTDOWN_TIMEOUT=20s",
	}
	if direct != "" {
		env = append(env, "DATABASE_DIRECT_URL="+direct)
	}
	return env
}

// withAppName is databaseURL with application_name set.
func withAppName(t *testing.T, databaseURL, name string) string {
	t.Helper()
	u, err := url.Parse(databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// directListens counts the backends on DATABASE_DIRECT_URL (directAppName)
// by what they last ran: postbox's wake-up LISTEN, which then only waits;
// River's notifier, which LISTENs on its channels and pings its
// connection now and then; anything else.
func directListens(t *testing.T, db *pgxpool.Pool) (wake, river, other int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := db.QueryRow(ctx, `SELECT
	count(*) FILTER (WHERE query ILIKE 'listen %postbox_wake%'),
	count(*) FILTER (WHERE query ILIKE 'listen %river%' OR query = '-- ping'),
	count(*) FILTER (WHERE query NOT ILIKE 'listen %' AND query <> '-- ping')
FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, directAppName).Scan(&wake, &river, &other)
	if err != nil {
		t.Fatal(err)
	}
	return wake, river, other
}

// hookReceivers are webhook endpoints that record each accepted request by
// (endpoint, webhook-id, User-Agent). From holdAgent, once it has had
// holdAfter requests accepted, they hold the next delivery's requests —
// that delivery's only, each time it is tried — without answering: its
// sender has it in flight for as long as it lives, with its other slots
// free.
type hookReceivers struct {
	servers   []*httptest.Server
	holdAgent string
	holdAfter int

	mu       sync.Mutex
	accepted map[[2]string][]string // {endpoint index, webhook-id} → User-Agents, in order
	byAgent  map[string]int
	heldKey  [2]string // the delivery held, once chosen
	held     atomic.Int64
	closing  chan struct{}
}

func startHookReceivers(t *testing.T, n int, holdAgent string, holdAfter int) *hookReceivers {
	r := &hookReceivers{holdAgent: holdAgent, holdAfter: holdAfter, accepted: map[[2]string][]string{}, byAgent: map[string]int{},
		closing: make(chan struct{})}
	t.Cleanup(func() {
		close(r.closing) // held requests end, so Close does not wait for them
		for _, s := range r.servers {
			s.Close()
		}
	})
	for i := range n {
		idx := strconv.Itoa(i)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			// The server notices the client hang up only once the body
			// is read.
			_, _ = io.Copy(io.Discard, req.Body)
			agent, key := req.Header.Get("User-Agent"), [2]string{idx, req.Header.Get(webhook.HeaderID)}
			r.mu.Lock()
			if agent == r.holdAgent && r.heldKey == ([2]string{}) && r.byAgent[agent] >= r.holdAfter {
				r.heldKey = key
			}
			hold := agent == r.holdAgent && key == r.heldKey
			if !hold {
				r.accepted[key] = append(r.accepted[key], agent)
				r.byAgent[agent]++
			}
			r.mu.Unlock()
			if hold {
				r.held.Add(1)
				select { // until the sender is gone, or gives up
				case <-req.Context().Done():
				case <-r.closing:
				}
				return
			}
			w.WriteHeader(http.StatusNoContent)
		}))
		r.servers = append(r.servers, srv)
	}
	return r
}

func (r *hookReceivers) from(agent string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byAgent[agent]
}

// hangOne is a relay's Hang that, once the relay has accepted after
// messages, holds the next row's messages — that row's only, each time it
// is sent — so its sender has it in flight with its other batches free.
func hangOne(sink **smtpsink.Sink, after int, hung *atomic.Int64) func(smtpsink.Envelope) bool {
	var mu sync.Mutex
	row := ""
	return func(env smtpsink.Envelope) bool {
		id := envelopeRowID(env.Data)
		mu.Lock()
		defer mu.Unlock()
		if row == "" && (*sink).Len() >= after {
			row = id
		}
		if id != row {
			return false
		}
		hung.Add(1)
		return true
	}
}

// envelopeRowID is the row id in a message's Message-ID, as the relay sees
// it before accepting it.
func envelopeRowID(data []byte) string {
	h, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(data))).ReadMIMEHeader()
	if err != nil && len(h) == 0 {
		return ""
	}
	id := strings.Trim(strings.TrimSpace(h.Get("Message-Id")), "<>")
	if i := strings.LastIndexByte(id, '@'); i >= 0 {
		return id[:i]
	}
	return ""
}

// TestRun_BehindPgBouncerTransactionPooling runs real `worker run`
// replicas with DATABASE_URL through a real PgBouncer in transaction mode
// (default_pool_size 8, so their pools share a few server connections),
// with wake-ups by LISTEN on DATABASE_DIRECT_URL and, without it, by
// polling: a backlog of emails and webhook events is drained while one
// replica is killed with SIGKILL holding rows in flight, and nothing is
// lost or sent more often than the leases allow.
//
// Three replicas drain the backlog; once 5 of each are accepted from the
// one to be killed, its relay and the receivers stop answering it for one
// email row and one delivery, each time it tries them, and it is killed
// as soon as it holds the email: it dies with rows in flight. The other
// two drain the rest and, once its leases have run out (the email claim
// lease at its shortest, 62 s), what it held. Every email row is sent and
// every delivery delivered; a row reaches the relays (or a receiver) twice
// only when the killed replica sent it and died before recording it.
func TestRun_BehindPgBouncerTransactionPooling(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out an email claim lease (62 s) after a kill -9")
	}
	bin := pgbouncertest.Binary(t)
	t.Parallel()
	for _, tc := range []struct {
		name   string
		direct bool
	}{
		{"wake-ups by LISTEN on DATABASE_DIRECT_URL", true},
		{"wake-ups by polling", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			drainBehindPooler(t, bin, tc.direct)
		})
	}
}

func drainBehindPooler(t *testing.T, bouncerBin string, withDirect bool) {
	const (
		emails, events, endpoints = 300, 100, 2
		holdAfter                 = 5 // what the doomed replica gets accepted before its relay and receivers hold one
	)
	dbURL := pgtest.URL(t)
	db := pgtest.Connect(t, dbURL)
	bouncer, pooled := pgbouncertest.Start(t, bouncerBin, dbURL, pgbouncertest.Options{DefaultPoolSize: 8})
	direct := ""
	if withDirect {
		direct = withAppName(t, dbURL, directAppName)
	}
	ctx := context.Background()

	const doomedAgent = "postbox-test-doomed"
	hooks := startHookReceivers(t, endpoints, doomedAgent, holdAfter)
	settings := webhook.Settings{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	for _, s := range hooks.servers {
		if _, err := webhook.CreateEndpoint(ctx, db, settings, webhook.EndpointParams{URL: s.URL}); err != nil {
			t.Fatal(err)
		}
	}
	var doomedSink *smtpsink.Sink
	var hung atomic.Int64
	doomedSink, err := smtpsink.Start(smtpsink.Options{DiscardData: true, Hang: hangOne(&doomedSink, holdAfter, &hung)})
	if err != nil {
		t.Fatal(err)
	}
	defer doomedSink.Close()
	sinks := []*smtpsink.Sink{doomedSink}
	for range 2 {
		s, err := smtpsink.Start(smtpsink.Options{DiscardData: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		sinks = append(sinks, s)
	}

	// The shortest leases the chain allows, so the dead replica's rows
	// come back within the test: 1×60 s ≤ 61 s < 60 s + 6 s, and a
	// webhook attempt and its mark fit in 13 s + 5 s < 19 s and 6 s.
	leases := []string{"EMAIL_CONCURRENCY=2", "EMAIL_BATCH_SIZE=1", "EMAIL_BATCH_TIMEOUT=61s", "LEASE_SLACK=6s",
		"WEBHOOK_BIRTH_LEASE=19s", "WEBHOOK_CONCURRENCY=4", "RETRY_BACKOFF_SCALE=0.001"}
	var (
		cmds []*exec.Cmd
		outs []*logbuf.Buffer
	)
	start := func(i int, agent string) {
		env := append(pooledEnv(t, pooled, direct, sinks[i]), leases...)
		cmd, out := startWorker(t, append(env, "WEBHOOK_USER_AGENT="+agent), "run")
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	logs := processLogs(&outs, "replica")

	// What the replicas asked of the pooler, for the log: its busiest
	// moment in server connections, and in clients waiting for one.
	watch := bouncer.WatchPeaks(ctx, 50*time.Millisecond, func(p pgbouncer.Pool) bool { return p.Database == pgtestDatabase(dbURL) })
	defer watch()

	for i, agent := range []string{doomedAgent, "postbox-test-1", "postbox-test-2"} {
		start(i, agent)
	}
	waitShifts(t, db, 3, logs)
	insertEmails(t, db, "pooled", emails)
	execSQL(t, db, `INSERT INTO webhook_outbox (event_type, payload)
		SELECT 'invoice.paid', jsonb_build_object('invoice_id', 'in_' || i) FROM generate_series(1, $1) AS i`, events)
	eventually.Explain(t, "the doomed replica holds an email at its relay", 2*time.Minute, func() bool { return hung.Load() > 0 }, logs)
	// A held email fails for good, possibly delivered, when its sender's
	// wait for the reply to the final dot (40 s) runs out; the kill comes
	// well before, with a delivery held by then or not. A held delivery
	// only times out into a retry.
	eventually.Within(10*time.Second, func() bool { return hooks.held.Load() > 0 })
	if err := cmds[0].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmds[0].Wait()
	doomedSent := doomedSink.CountByRowID()
	t.Logf("killed the doomed replica after %d emails and %d webhook requests accepted from it (%d email sends and %d requests held)",
		doomedSink.Len(), hooks.from(doomedAgent), hung.Load(), hooks.held.Load())

	eventually.Explain(t, "every email sent and every delivery delivered", 4*time.Minute, func() bool {
		return queryInt(t, db, `SELECT
			(SELECT count(*) FROM email_outbox WHERE status <> 'dispatched') +
			(SELECT count(*) FROM webhook_outbox WHERE status <> 'dispatched') +
			(SELECT count(*) FROM webhook_deliveries WHERE status <> 'succeeded') +
			$1::int - (SELECT count(*) FROM webhook_deliveries)`, events*endpoints) == 0
	}, logs)

	// Emails: every row reached a relay; twice only when the killed
	// replica's relay took it first.
	perRow := map[string]int{}
	for _, s := range sinks {
		for id, n := range s.CountByRowID() {
			perRow[id] += n
		}
	}
	for _, id := range queryIDs(t, db, `SELECT id::text FROM email_outbox`) {
		switch n := perRow[id]; {
		case n == 0:
			t.Errorf("email %s is dispatched but reached no relay", id)
		case n == 2 && doomedSent[id] == 1:
			t.Logf("email %s sent twice: the killed replica's relay took it before its mark", id)
		case n > 1:
			t.Errorf("email %s reached the relays %d times (the killed replica's %d)", id, n, doomedSent[id])
		}
	}
	if len(perRow) != emails {
		t.Errorf("the relays saw %d distinct rows, want %d", len(perRow), emails)
	}
	if n := queryInt(t, db, `SELECT count(*) FROM email_outbox o WHERE
		(SELECT count(*) FROM email_attempts a WHERE a.row_id = o.id AND a.outcome = 'sent') <> 1`); n != 0 {
		t.Errorf("%d rows without exactly one sent attempt", n)
	}

	// Webhooks: one event per outbox row, every delivery accepted; twice
	// only when the killed replica's request was accepted first.
	if n := queryInt(t, db, `SELECT count(*) FROM webhook_events`); n != events {
		t.Errorf("%d events from %d webhook_outbox rows", n, events)
	}
	ids := queryIDs(t, db, `SELECT id::text FROM webhook_events`)
	hooks.mu.Lock()
	for i := range endpoints {
		for _, id := range ids {
			agents := hooks.accepted[[2]string{strconv.Itoa(i), id}]
			switch {
			case len(agents) == 0:
				t.Errorf("event %s never reached endpoint %d", id, i)
			case len(agents) == 2 && agents[0] == doomedAgent:
				t.Logf("event %s reached endpoint %d twice: the killed replica's attempt was not recorded", id, i)
			case len(agents) > 1:
				t.Errorf("event %s reached endpoint %d %d times, from %v", id, i, len(agents), agents)
			}
		}
	}
	hooks.mu.Unlock()

	peaks := watch()
	t.Logf("the pooler's busiest moment: %d server connections active (default_pool_size 8) for 3 replicas' pools of 10; at most %d clients waiting",
		peaks.ServersActive, peaks.ClientsWaiting)

	if withDirect {
		// Only the two listeners of each live replica ride the direct
		// URL: the wake-up listener and River's notifier.
		eventually.Explain(t, "each live replica's two listeners on DATABASE_DIRECT_URL, and nothing else", time.Minute, func() bool {
			wake, river, other := directListens(t, db)
			return wake == 2 && river == 2 && other == 0
		}, func() string {
			wake, river, other := directListens(t, db)
			return fmt.Sprintf("wake %d, river %d, other %d\n%s", wake, river, other, logs())
		})
	}

	for i, cmd := range cmds[1:] {
		stopWorker(t, cmd, outs[i+1])
	}
	wakeups := `"wakeups":"poll"`
	if withDirect {
		wakeups = `"wakeups":"listen"`
	}
	for i, out := range outs {
		log := out.String()
		for _, want := range []string{`"pool_mode":"transaction"`, `"exec_mode":"cache_describe"`, wakeups} {
			if !strings.Contains(log, want) {
				t.Errorf("replica %d's boot log lacks %s", i, want)
			}
		}
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, `"level":"ERROR"`) || strings.Contains(line, "prepared statement") || strings.Contains(line, "wake-up listener") {
				t.Errorf("replica %d logged: %s", i, line)
			}
		}
	}
	if t.Failed() {
		t.Logf("logs:\n%s", logs())
	}
}

// A replica behind the pooler is woken through DATABASE_DIRECT_URL: its
// wake-up listener and River's notifier are its only connections there,
// and with its poll an hour, a row inserted once it is idle is still sent
// — by the insert trigger's notification, which a LISTEN through the
// pooler would never receive.
func TestRun_BehindPgBouncer_PlainInsertWakesTheReplica(t *testing.T) {
	bin := pgbouncertest.Binary(t)
	t.Parallel()
	dbURL := pgtest.URL(t)
	db := pgtest.Connect(t, dbURL)
	_, pooled := pgbouncertest.Start(t, bin, dbURL, pgbouncertest.Options{})
	sink, err := smtpsink.Start(smtpsink.Options{DiscardData: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	env := append(pooledEnv(t, pooled, withAppName(t, dbURL, directAppName), sink), "POLL_INTERVAL=1h")
	cmd, out := startWorker(t, env, "run")
	waitShifts(t, db, 1, out.String)
	eventually.Explain(t, "the wake-up listener and River's notifier on DATABASE_DIRECT_URL, and nothing else", time.Minute, func() bool {
		wake, river, other := directListens(t, db)
		return wake == 1 && river == 1 && other == 0
	}, out.String)
	// Past the lane's hot spell after its start: only a wake-up claims now.
	time.Sleep(3 * time.Second) // simulates: time passing for the lane's hot spell after its start (2 s)
	insertEmails(t, db, "woken", 1)
	waitEmails(t, db, 30*time.Second, out.String)
	stopWorker(t, cmd, out)
	if sink.Len() != 1 {
		t.Fatalf("relay got %d messages, want 1", sink.Len())
	}
}

// The commands behind the pooler: they run in its exec mode through it;
// `migrate` runs on DATABASE_DIRECT_URL when it is set, and through the
// pooler, down and up, when it is not; `run` refuses a direct URL that
// reaches another database, naming it.
func TestCommands_BehindPgBouncer(t *testing.T) {
	bin := pgbouncertest.Binary(t)
	t.Parallel()
	dbURL := pgtest.URL(t)
	db := pgtest.Connect(t, dbURL)
	_, pooled := pgbouncertest.Start(t, bin, dbURL, pgbouncertest.Options{})
	insertEmails(t, db, "stats", 3)
	worker := workerBinary(t)
	behind := []string{"DATABASE_URL=" + pooled, "DATABASE_POOL_MODE=transaction", "HTTP_ADDR=" + freeAddr(t)}

	if code, out := runBinary(t, worker, behind, "stats"); code != 0 || !strings.Contains(out, "pending") {
		t.Errorf("stats through the pooler: exit %d\n%s", code, out)
	}
	if code, out := runBinary(t, worker, behind, "migrate", "status"); code != 0 || !strings.Contains(out, "current") {
		t.Errorf("migrate status through the pooler: exit %d\n%s", code, out)
	}
	direct := append(slices.Clone(behind), "DATABASE_DIRECT_URL="+dbURL)
	if code, out := runBinary(t, worker, direct, "migrate", "status"); code != 0 || !strings.Contains(out, "migrating over DATABASE_DIRECT_URL") {
		t.Errorf("migrate status with a direct URL: exit %d, want 0 and the direct URL named\n%s", code, out)
	}
	nowhere := append(slices.Clone(behind), "DATABASE_DIRECT_URL=postgres://postgres:s3cret@127.0.0.1:1/postbox?connect_timeout=3")
	if code, out := runBinary(t, worker, nowhere, "migrate", "status"); code != 1 || !strings.Contains(out, "DATABASE_DIRECT_URL") || strings.Contains(out, "s3cret") {
		t.Errorf("migrate status with an unreachable direct URL: exit %d, want 1 naming DATABASE_DIRECT_URL without its password\n%s", code, out)
	}
	elsewhere := append(slices.Clone(behind), "DATABASE_DIRECT_URL="+pgtest.URL(t))
	if code, out := runBinary(t, worker, elsewhere, "run"); code == 0 || !strings.Contains(out, "DATABASE_DIRECT_URL reaches database") {
		t.Errorf("run with a direct URL to another database: exit %d, want a refusal naming DATABASE_DIRECT_URL\n%s", code, out)
	}

	// Without a direct URL the migrations go through the pooler, and
	// work there: no session lock, each step its own transaction or
	// statement (CREATE INDEX CONCURRENTLY among them).
	for _, args := range [][]string{{"migrate", "down", "--all"}, {"migrate", "up"}} {
		if code, out := runBinary(t, worker, behind, args...); code != 0 {
			t.Fatalf("%s through the pooler: exit %d\n%s", strings.Join(args, " "), code, out)
		}
	}
	if code, out := runBinary(t, worker, behind, "migrate", "status"); code != 0 || !strings.Contains(out, "current") {
		t.Errorf("migrate status after down and up through the pooler: exit %d\n%s", code, out)
	}
}

// pgtestDatabase is the database name of a pgtest URL.
func pgtestDatabase(databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(u.Path, "/")
}
