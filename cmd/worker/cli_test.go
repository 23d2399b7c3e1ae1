package main

import (
	"bytes"
	"flag"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// noEnv is an environment in which loading the configuration fails: a
// command that parsed its arguments and went on would exit 1, not 0 or 2.
func noEnv(k string) (string, bool) {
	if k == "APP_ENV" {
		return "bogus", true
	}
	return "", false
}

func run(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = runMain(args, noEnv, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestEveryCommandHelpAndUsage is the CLI's contract, per subcommand:
// --help and -h exit 0 (before any configuration is read) and describe
// the command and every flag; an unknown flag or a stray argument exits 2
// with the usage on stderr.
func TestEveryCommandHelpAndUsage(t *testing.T) {
	t.Parallel()
	// The table: a command added or removed must show here, so its help
	// and usage are checked on purpose, not by luck.
	want := []string{"run", "demo", "migrate up", "migrate down", "migrate status", "show", "stats",
		"failed email", "failed webhook", "requeue email", "requeue delivery", "requeue webhook", "cancel email", "cancel webhook", "replay event",
		"replay endpoint", "replay tenant", "deliveries list", "endpoints create", "endpoints list", "endpoints update", "endpoints disable", "endpoints enable", "endpoints delete",
		"endpoints limit", "endpoints traceparent", "endpoints order-on-failure", "endpoints rotate-secret",
		"ordering blocked", "ordering skip", "portal link", "api-key new",
		"suppressions list", "suppressions add", "suppressions remove", "suppressions check",
		"templates list", "templates check", "templates render", "event-types check", "event-types sync", "event-types list",
		"rekey", "healthcheck", "version"}
	got := slices.Clone(order)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("registered commands %q, want %q", got, want)
	}
	for _, name := range order {
		c := commands[name]
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			args := strings.Fields(name)
			if c.Summary == "" || len(c.Help) < 60 {
				t.Errorf("%s: no summary or a help paragraph under 60 characters", name)
			}
			for _, h := range []string{"--help", "-h"} {
				code, out, errOut := run(append(args, h)...)
				if code != 0 || errOut != "" {
					t.Fatalf("worker %s %s: exit %d, stderr %q", name, h, code, errOut)
				}
				if !strings.Contains(out, "usage: worker "+name) || !strings.Contains(out, wrap(c.Help)[:40]) {
					t.Errorf("worker %s %s lacks the usage or the description:\n%s", name, h, out)
				}
				fs, _ := c.flagSet()
				fs.VisitAll(func(f *flag.Flag) {
					if !strings.Contains(out, "--"+f.Name) {
						t.Errorf("worker %s %s does not mention --%s:\n%s", name, h, f.Name, out)
					}
				})
			}
			code, out, errOut := run(append(args, "--no-such-flag")...)
			if code != 2 || out != "" || !strings.Contains(errOut, "usage: worker "+name) ||
				!strings.Contains(errOut, "no-such-flag") {
				t.Errorf("worker %s --no-such-flag: exit %d, stdout %q, stderr %q; want 2 and the usage on stderr",
					name, code, out, errOut)
			}
			stray := append(args, c.Positional...)
			stray = append(stray, "stray-argument")
			code, _, errOut = run(stray...)
			if code != 2 || !strings.Contains(errOut, `unexpected argument "stray-argument"`) {
				t.Errorf("worker %s: exit %d, stderr %q; want 2 for a stray argument", strings.Join(stray, " "), code, errOut)
			}
			if len(c.Positional) > 0 {
				code, _, errOut = run(args...)
				if code != 2 || !strings.Contains(errOut, "missing argument") {
					t.Errorf("worker %s without arguments: exit %d, stderr %q; want 2", name, code, errOut)
				}
			}
		})
	}
}

func TestGroupsAndTopLevel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args     []string
		code     int
		contains string // in stdout for 0, stderr otherwise
	}{
		{[]string{"--help"}, 0, "worker <command> --help"},
		{[]string{"-h"}, 0, "commands:"},
		{[]string{"help"}, 0, "commands:"},
		{[]string{"help", "migrate", "status"}, 0, "usage: worker migrate status"},
		{[]string{"help", "nope"}, 2, "unknown command"},
		{nil, 2, "usage: worker <command>"},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		// A malformed id is the same usage error from every command.
		{[]string{"requeue", "email", "nope"}, 2, `<id> "nope" is not an id: want a UUID`},
		{[]string{"requeue", "delivery", "1234"}, 2, `<delivery-id> "1234" is not an id`},
		{[]string{"replay", "event", "ev_1"}, 2, `<event-id> "ev_1" is not an id`},
		{[]string{"endpoints", "disable", "ep_1"}, 2, `<id> "ep_1" is not an id`},
		{[]string{"stat"}, 2, `unknown command "stat"; did you mean stats?`},
		{[]string{"help", "sho"}, 2, `did you mean show?`},
		{[]string{"migrate", "stauts"}, 2, `unknown subcommand "stauts"; did you mean status?`},
		{[]string{"--nope"}, 2, "unknown flag --nope"},
		{[]string{"--version"}, 0, "postbox worker "},
		{[]string{"version"}, 0, "postbox worker "},
		{[]string{"migrate"}, 2, "a subcommand is required"},
		{[]string{"migrate", "sideways"}, 2, `unknown subcommand "sideways"`},
		{[]string{"failed", "sms"}, 2, `unknown subcommand "sms"`},
		// Parsed, then the configuration fails: 1, naming the variable.
		{[]string{"stats"}, 1, "APP_ENV"},
		{[]string{"run"}, 1, "APP_ENV"},
		// Flags that parse but are out of range are usage errors too.
		{[]string{"replay", "endpoint", "00000000-0000-4000-8000-0000000000e1"}, 2, "--since is required"},
		{[]string{"replay", "endpoint", "00000000-0000-4000-8000-0000000000e1", "--since", "yesterday"}, 2, "want an RFC3339 time"},
		{[]string{"failed", "email", "--limit", "0"}, 2, `invalid value "0" for flag --limit: want at least 1`},
		{[]string{"failed", "email", "--jsn"}, 2, "unknown flag --jsn; did you mean --json?"},
		{[]string{"failed", "email", "--limit"}, 2, "flag needs an argument: --limit"},
		{[]string{"endpoints", "create"}, 2, "--url is required"},
		{[]string{"suppressions"}, 2, "a subcommand is required"},
		{[]string{"suppressions", "purge"}, 2, `unknown subcommand "purge"`},
		{[]string{"suppressions", "add", "ada@example.com"}, 2, "--reason is required"},
		{[]string{"suppressions", "remove"}, 2, "missing argument"},
		{[]string{"suppressions", "check", "a@example.com", "b@example.com"}, 2, "unexpected argument"},
		{[]string{"suppressions", "list", "--limit", "0"}, 2, "want at least 1"},
		{[]string{"show"}, 2, "missing argument <anything>"},
		{[]string{"show", "INV-1", "--kind", "bogus"}, 2, `kind "bogus" is not one of email, event`},
		{[]string{"show", "INV-1"}, 1, "APP_ENV"},
		{[]string{"endpoints", "rotate-secret", "00000000-0000-4000-8000-0000000000e1", "--keep", "-1h"}, 2, "want a duration from 0 to 720h"},
		{[]string{"endpoints", "rotate-secret", "00000000-0000-4000-8000-0000000000e1", "--keep", "1000h"}, 2, "want a duration from 0 to 720h"},
		{[]string{"endpoints", "limit", "00000000-0000-4000-8000-0000000000e1", "--rate", "-1"}, 2, "must be 0 (none) or positive"},
		{[]string{"endpoints", "limit", "00000000-0000-4000-8000-0000000000e1", "--max-in-flight", "20000"}, 2, "max in flight 20000"},
	} {
		code, out, errOut := run(tc.args...)
		got := errOut
		if tc.code == 0 {
			got = out
		}
		if code != tc.code || !strings.Contains(got, tc.contains) {
			t.Errorf("worker %s: exit %d, stdout %q, stderr %q; want %d and %q",
				strings.Join(tc.args, " "), code, out, errOut, tc.code, tc.contains)
		}
	}
	for name := range groups {
		code, out, _ := run(name, "--help")
		if code != 0 {
			t.Errorf("worker %s --help: exit %d", name, code)
		}
		for _, sub := range groupMembers(name) {
			if !strings.Contains(out, sub.synopsis()) {
				t.Errorf("worker %s --help does not list %q:\n%s", name, sub.synopsis(), out)
			}
		}
	}
	_, out, _ := run("--help")
	for _, name := range order {
		if !strings.Contains(out, commands[name].Summary) {
			t.Errorf("worker --help does not list %s", name)
		}
	}
}

// TestBinaryHelpDoesNotStart: the built binary, as a user runs it: `run
// --help` prints help and exits 0 however broken the environment is, and
// never starts a replica.
func TestBinaryHelpDoesNotStart(t *testing.T) {
	t.Parallel()
	bin := workerBinary(t)
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"run", "--help"}, 0},
		{[]string{"--help"}, 0},
		{[]string{"run", "extra-arg"}, 2},
	} {
		cmd := exec.Command(bin, tc.args...)
		cmd.Env = []string{"APP_ENV=bogus", "DATABASE_URL=postgres://postgres@127.0.0.1:1/x"}
		out, _ := cmd.CombinedOutput()
		if got := cmd.ProcessState.ExitCode(); got != tc.code || strings.Contains(string(out), "postbox worker starting") {
			t.Errorf("worker %s: exit %d, want %d; output:\n%s", strings.Join(tc.args, " "), got, tc.code, out)
		}
	}
}
