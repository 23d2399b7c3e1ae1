package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// The endpoint commands against a real database: limit sets what list
// shows with the breaker's state; rotate-secret prints the new secret
// once, different from the one create printed, and with --json prints it
// under create --json's names.
func TestEndpointsLimitRotateList(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": pgtest.URL(t), "LOG_LEVEL": "error"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	worker := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := runMain(args, lookup, &out, &errOut); code != 0 {
			t.Fatalf("worker %s: exit %d, stderr %q", strings.Join(args, " "), code, errOut.String())
		}
		return out.String()
	}
	secretRE := regexp.MustCompile(`whsec_[A-Za-z0-9+/=]+`)
	created := worker("endpoints", "create", "--url", "https://example.com/in")
	id := regexp.MustCompile(`endpoint (\S+) created`).FindStringSubmatch(created)[1]
	first := secretRE.FindString(created)

	worker("endpoints", "limit", id, "--rate", "2.5", "--max-in-flight", "4")
	list := worker("endpoints", "list")
	// No tenant ("-"); "new": it has accepted no delivery yet, so it is
	// under the new endpoint's cap of first attempts.
	if !regexp.MustCompile(id + `\s+-\s+enabled\s+new\s+0\s+-\s+2.5\s+4\s+-\s+-\s`).MatchString(list) {
		t.Fatalf("list does not show the breaker and limits:\n%s", list)
	}

	rotated := worker("endpoints", "rotate-secret", id, "--keep", "1h")
	secrets := secretRE.FindAllString(rotated, -1)
	if len(secrets) != 1 || secrets[0] == first || !strings.Contains(rotated, "signs too until") {
		t.Fatalf("rotate-secret printed %q, want one new secret and the old one's expiry", rotated)
	}
	if strings.Contains(worker("endpoints", "list", "--json"), "whsec_") {
		t.Fatal("list prints a secret")
	}

	// A tenant's endpoint: created with --tenant, listed with it.
	acme := worker("endpoints", "create", "--tenant", "acme", "--url", "https://acme.example/hooks")
	acmeID := regexp.MustCompile(`endpoint (\S+) created`).FindStringSubmatch(acme)[1]
	if !regexp.MustCompile(`tenant\s+acme\n`).MatchString(acme) || !regexp.MustCompile(acmeID+`\s+acme\s+enabled`).MatchString(worker("endpoints", "list")) {
		t.Fatalf("create --tenant acme printed %q; list must show the tenant", acme)
	}
	var out, errOut bytes.Buffer
	if code := runMain([]string{"endpoints", "create", "--tenant", "ac\tme", "--url", "https://acme.example/x"}, lookup, &out, &errOut); code == 0 ||
		!strings.Contains(errOut.String(), `tenant "ac\tme"`) {
		t.Fatalf("create with a control character in --tenant: exit %d, stderr %q; want refused, naming it", code, errOut.String())
	}

	// --json: the id and secret under the names create --json gives them.
	var made, again struct {
		ID        string     `json:"id"`
		Secret    string     `json:"secret"`
		OldExpiry *time.Time `json:"old_secret_expires_at"`
	}
	if err := json.Unmarshal([]byte(worker("endpoints", "create", "--url", "https://example.com/json", "--json")), &made); err != nil || made.ID == "" || made.Secret == "" {
		t.Fatalf("create --json: %+v, %v", made, err)
	}
	if err := json.Unmarshal([]byte(worker("endpoints", "rotate-secret", made.ID, "--keep", "1h", "--json")), &again); err != nil {
		t.Fatalf("rotate-secret --json: %v", err)
	}
	if again.ID != made.ID || !secretRE.MatchString(again.Secret) || again.Secret == made.Secret ||
		again.OldExpiry == nil || time.Until(*again.OldExpiry) <= 0 {
		t.Fatalf("rotate-secret --json = %+v; want the endpoint's id, a new secret and the old one's expiry", again)
	}
}

// endpoints create resolves the URL as each attempt will: one the SSRF
// guard refuses is not created, with the reason; one that does not resolve
// yet, or that another endpoint already has, is created with a warning.
// An IPv4-mapped address is admitted by the IPv4 CIDR it maps into.
// endpoints list shows a URL's query token redacted.
func TestEndpointsCreateChecksTheAddress(t *testing.T) {
	t.Parallel()
	db := pgtest.URL(t)
	run := func(env map[string]string, args ...string) (int, string, string) {
		t.Helper()
		env["DATABASE_URL"], env["LOG_LEVEL"] = db, "error"
		var out, errOut bytes.Buffer
		code := runMain(args, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, _, errOut := run(map[string]string{}, "endpoints", "create", "--url", "http://127.0.0.1:9/hook")
	if code != 1 || !strings.Contains(errOut, "not created: every attempt would be refused") || !strings.Contains(errOut, "loopback") {
		t.Fatalf("loopback URL: exit %d, stderr %q; want refused with the guard's reason", code, errOut)
	}
	allowed := map[string]string{"WEBHOOK_ALLOWED_CIDRS": "127.0.0.0/8"}
	if code, _, errOut := run(allowed, "endpoints", "create", "--url", "http://127.0.0.1:9/hook"); code != 0 || errOut != "" {
		t.Fatalf("loopback URL, admitted: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := run(allowed, "endpoints", "create", "--url", "http://127.0.0.1:9/hook"); code != 0 || !strings.Contains(errOut, "already has this URL") {
		t.Fatalf("the same URL again: exit %d, stderr %q; want created with a warning", code, errOut)
	}
	// localhost may resolve to ::ffff:127.0.0.1 (Go's resolver reads
	// /etc/hosts so): the IPv4 CIDR admits it, and the refusal names the
	// CIDR that would.
	code, _, errOut = run(map[string]string{}, "endpoints", "create", "--url", "http://[::ffff:127.0.0.1]:9/mapped")
	if code != 1 || !strings.Contains(errOut, "admit it with WEBHOOK_ALLOWED_CIDRS=127.0.0.1/32") {
		t.Fatalf("IPv4-mapped loopback URL: exit %d, stderr %q; want refused naming the CIDR that admits it", code, errOut)
	}
	v4 := map[string]string{"WEBHOOK_ALLOWED_CIDRS": "127.0.0.1/32,::1/128"}
	for _, url := range []string{"http://[::ffff:127.0.0.1]:9/mapped", "http://localhost:9/hooks"} {
		if code, _, errOut := run(v4, "endpoints", "create", "--url", url); code != 0 || strings.Contains(errOut, "refus") {
			t.Fatalf("%s with %v: exit %d, stderr %q; want created", url, v4, code, errOut)
		}
	}
	code, _, errOut = run(map[string]string{}, "endpoints", "create", "--url", "https://hooks.postbox-test.invalid/in?token=tok-SECRET")
	if code != 0 || !strings.Contains(errOut, "does not resolve now") {
		t.Fatalf("unresolvable URL: exit %d, stderr %q; want created with a warning", code, errOut)
	}
	_, list, _ := run(map[string]string{}, "endpoints", "list")
	if strings.Contains(list, "tok-SECRET") || !strings.Contains(list, "https://hooks.postbox-test.invalid/in?REDACTED") {
		t.Fatalf("endpoints list shows the token, or not the endpoint:\n%s", list)
	}
}

// Every endpoints command that takes --tenant, given another tenant's
// endpoint id, says it is not found and changes nothing; given its own, it
// works. The list is every registered command with a --tenant flag, so one
// added without a case here fails.
func TestEndpointsTenantReachesOnlyItsOwn(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": pgtest.URL(t), "LOG_LEVEL": "error"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := runMain(args, lookup, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	idRE := regexp.MustCompile(`endpoint (\S+) created`)
	create := func(tenant string) string {
		t.Helper()
		code, out, errOut := run("endpoints", "create", "--tenant", tenant, "--url", "https://"+tenant+".example/hooks", "--event-types", "invoice.paid")
		if code != 0 {
			t.Fatalf("create for %s: exit %d: %s", tenant, code, errOut)
		}
		return idRE.FindStringSubmatch(out)[1]
	}
	acme, globex := create("acme"), create("globex")
	pool := pgtest.Connect(t, env["DATABASE_URL"])
	state := func() string {
		t.Helper()
		var s string
		if err := pool.QueryRow(context.Background(), `SELECT concat_ws('|', url, secret, event_types, enabled, disabled_reason)
			FROM webhook_endpoints WHERE id = $1`, globex).Scan(&s); err != nil {
			t.Fatalf("globex's endpoint: %v", err)
		}
		return s
	}

	// globex's event, fanned out to its endpoint, which failed it.
	var globexEvent string
	if err := pool.QueryRow(context.Background(), `WITH e AS (INSERT INTO webhook_events (tenant_id, event_type, payload) VALUES ('globex', 'invoice.paid', '{}') RETURNING id)
		INSERT INTO webhook_deliveries (event_id, endpoint_id, status, attempts, last_error) SELECT id, $1, 'failed', 1, 'HTTP 500' FROM e RETURNING event_id::text`,
		globex).Scan(&globexEvent); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		args     []string
		notFound string // what stderr says of another tenant's id; "" for a command that takes no id
	}{
		"endpoints list":          {[]string{"endpoints", "list", "--tenant", "acme"}, ""},
		"endpoints update":        {[]string{"endpoints", "update", globex, "--url", "https://moved.example/", "--tenant", "acme"}, "not found: endpoint " + globex},
		"endpoints disable":       {[]string{"endpoints", "disable", globex, "--tenant", "acme"}, "not found: endpoint " + globex},
		"endpoints enable":        {[]string{"endpoints", "enable", globex, "--tenant", "acme"}, "not found: endpoint " + globex},
		"endpoints delete":        {[]string{"endpoints", "delete", globex, "--yes", "--tenant", "acme"}, "not found: endpoint " + globex},
		"endpoints rotate-secret": {[]string{"endpoints", "rotate-secret", globex, "--tenant", "acme"}, "not found: endpoint " + globex},
		"replay event":            {[]string{"replay", "event", globexEvent, "--tenant", "acme"}, "not found: event " + globexEvent},
		"replay endpoint":         {[]string{"replay", "endpoint", globex, "--since", "1h", "--tenant", "acme"}, "not found: endpoint " + globex},
		"show":                    {[]string{"show", globex, "--tenant", "acme"}, "nothing matches: endpoint " + globex + " of tenant acme"},
		"deliveries list":         {[]string{"deliveries", "list", "--tenant", "acme", "--endpoint", globex}, "not found: endpoint " + globex},
		"endpoints create":        {}, // --tenant names the endpoint's own tenant: no id to reach
	}
	for name, c := range commands {
		if c.Flags == nil {
			continue
		}
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		c.Flags(fs)
		if _, ok := cases[name]; fs.Lookup("tenant") != nil && !ok {
			t.Errorf("%s takes --tenant and has no case here", name)
		}
	}
	if _, err := pool.Exec(context.Background(), `UPDATE webhook_endpoints SET enabled = false, disabled_reason = 'by operator' WHERE id = $1`, globex); err != nil {
		t.Fatal(err)
	}
	for name, c := range cases {
		if c.args == nil {
			continue
		}
		before := state()
		code, out, errOut := run(c.args...)
		if c.notFound == "" {
			if code != 0 || strings.Contains(out, globex) || !strings.Contains(out, acme) {
				t.Errorf("%s as acme: exit %d, %q; want acme's endpoint only", name, code, out)
			}
			continue
		}
		if code == 0 || !strings.Contains(errOut, c.notFound) {
			t.Errorf("%s with globex's id as acme: exit %d, stderr %q; want %s not found", name, code, errOut, c.notFound)
		}
		if after := state(); after != before {
			t.Errorf("%s with globex's id as acme changed it: %s -> %s", name, before, after)
		}
	}
	// deliveries list shows acme's only: globex's failed one is not there.
	if code, out, errOut := run("deliveries", "list", "--tenant", "acme"); code != 0 || strings.Contains(out, globexEvent) || strings.Contains(out, globex) {
		t.Errorf("deliveries list --tenant acme: exit %d, %q %q; want none of globex's", code, out, errOut)
	}
	if code, out, _ := run("deliveries", "list", "--tenant", "globex", "--status", "failed"); code != 0 || !strings.Contains(out, globex) {
		t.Errorf("deliveries list --tenant globex --status failed: exit %d, %q; want its failed delivery", code, out)
	}
	// replay tenant takes the tenant, not an id: acme's recovery reaches
	// none of globex's failed deliveries.
	if code, out, errOut := run("replay", "tenant", "acme", "--since", "1h"); code != 0 || !strings.Contains(out, "replayed 0 events") {
		t.Errorf("replay tenant acme: exit %d, %q %q; want nothing of globex's replayed", code, out, errOut)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM webhook_events WHERE replay_of = $1::uuid`, globexEvent); n != 0 {
		t.Errorf("acme's commands cloned globex's event %d times", n)
	}
	// Its own: each works.
	for _, args := range [][]string{
		{"replay", "tenant", "acme", "--since", "1h"},
		{"show", acme, "--tenant", "acme"},
		{"endpoints", "update", acme, "--event-types", "", "--tenant", "acme"},
		{"endpoints", "disable", acme, "--tenant", "acme"},
		{"endpoints", "enable", acme, "--tenant", "acme"},
		{"endpoints", "rotate-secret", acme, "--tenant", "acme"},
		{"endpoints", "delete", acme, "--yes", "--tenant", "acme"},
	} {
		if code, _, errOut := run(args...); code != 0 {
			t.Errorf("%s: exit %d, %s", strings.Join(args, " "), code, errOut)
		}
	}
	if code, _, errOut := run("endpoints", "delete", globex); code != 2 || !strings.Contains(errOut, "--yes") {
		t.Errorf("delete without --yes: exit %d, %q; want a usage error asking for --yes", code, errOut)
	}
}
