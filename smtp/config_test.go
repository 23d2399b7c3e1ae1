package smtp

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func envLookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
}

func TestConfigFromEnv_Defaults(t *testing.T) {
	t.Parallel()
	cfg, err := ConfigFromEnv(envLookup(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Host: "localhost", Port: 587, Mode: ModeSTARTTLS, From: "postbox@localhost", AppEnv: "development",
		MaxIdle: defaultMaxIdle, IdleTimeout: defaultIdleTimeout}
	if cfg != want {
		t.Fatalf("defaults = %+v\nwant       %+v", cfg, want)
	}
	for mode, port := range map[string]int{"tls": 465, "none": 1025, "STARTTLS": 587} {
		cfg, err := ConfigFromEnv(envLookup(map[string]string{"SMTP_TLS": mode}))
		if err != nil || cfg.Port != port {
			t.Errorf("SMTP_TLS=%s: port %d, err %v; want %d", mode, cfg.Port, err, port)
		}
	}
}

func TestConfigFromEnv_AllSet(t *testing.T) {
	t.Parallel()
	_, files := newBundle(t)
	cfg, err := ConfigFromEnv(envLookup(map[string]string{
		"SMTP_HOST": "relay.example.com", "SMTP_PORT": "2525", "SMTP_TLS": "tls",
		"SMTP_USERNAME": "postbox", "SMTP_PASSWORD": " pw with spaces ", "SMTP_FROM": "Billing <billing@example.com>",
		"SMTP_CA_FILE": files.CA, "APP_ENV": "production",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "relay.example.com" || cfg.Port != 2525 || cfg.Mode != ModeTLS || cfg.Username != "postbox" ||
		cfg.Password != " pw with spaces " || cfg.From != "Billing <billing@example.com>" || cfg.CAFile != files.CA ||
		!cfg.production() {
		t.Fatalf("cfg = %#v (password %q)", cfg, cfg.Password)
	}
}

func TestConfigFromEnv_BadValuesNameTheVariable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"SMTP_TLS": "bogus"}, `SMTP_TLS="bogus": must be starttls, tls or none`},
		{map[string]string{"SMTP_TLS": "ssl"}, `SMTP_TLS="ssl"`},
		{map[string]string{"SMTP_PORT": "smtp"}, `SMTP_PORT="smtp"`},
		{map[string]string{"SMTP_PORT": "70000"}, `SMTP_PORT="70000"`},
		{map[string]string{"SMTP_FROM": "not an address"}, `SMTP_FROM="not an address"`},
		{map[string]string{"SMTP_CA_FILE": filepath.Join(dir, "missing.pem")}, "SMTP_CA_FILE"},
		{map[string]string{"SMTP_CA_FILE": notPEM}, "SMTP_CA_FILE"},
		{map[string]string{"SMTP_USERNAME": "u"}, "SMTP_PASSWORD"},
		{map[string]string{"SMTP_HOST": "mail.example.com", "SMTP_TLS": "none", "SMTP_USERNAME": "u", "SMTP_PASSWORD": "p"}, "SMTP_TLS=none"},
		{map[string]string{"SMTP_HOST": "relay example"}, "SMTP_HOST"},
	}
	for _, tc := range cases {
		_, err := ConfigFromEnv(envLookup(tc.env))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("env %v: err = %v; want it to contain %q", tc.env, err, tc.want)
		}
	}
	// Every problem at once, so a newcomer fixes them in one round.
	_, err := ConfigFromEnv(envLookup(map[string]string{"SMTP_TLS": "bogus", "SMTP_PORT": "x"}))
	if err == nil || !strings.Contains(err.Error(), "SMTP_TLS") || !strings.Contains(err.Error(), "SMTP_PORT") {
		t.Errorf("err = %v; want both variables named", err)
	}
}

// The password never reaches a log, a %v, or an error.
func TestConfig_PasswordNeverPrinted(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-very-secret"
	cfg := Config{Host: "relay.example.com", Mode: ModeSTARTTLS, Username: "postbox", Password: secret, From: "a@example.com"}

	logger, logs := newLogger()
	newMailer(t, cfg, logger)
	var js strings.Builder
	slog.New(slog.NewJSONHandler(&js, nil)).Info("cfg", "smtp", cfg)
	printed := fmt.Sprintf("%v %+v %#v %s", cfg, cfg, cfg, cfg) + js.String() + logs.String()
	if strings.Contains(printed, secret) {
		t.Fatalf("password printed: %s", printed)
	}
	boot := logs.lines(slog.LevelInfo, "smtp transport")
	if len(boot) != 1 {
		t.Fatalf("want one boot line, got:\n%s", logs)
	}
	for _, want := range []string{"mode=starttls", "host=relay.example.com", "port=587", "auth_configured=true"} {
		if !strings.Contains(boot[0], want) {
			t.Errorf("boot line %q lacks %q", boot[0], want)
		}
	}
	if !json.Valid([]byte(js.String())) {
		t.Errorf("LogValue produced invalid JSON: %s", js.String())
	}
}

// TestBootLineSaysWhereMailGoes: the boot line's message names the relay's
// address with the port SMTP_TLS defaults it to, the mode and its setting,
// and whether AUTH is configured, never the credentials.
func TestBootLineSaysWhereMailGoes(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-very-secret"
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{nil, "smtp transport: mail goes to localhost:587, STARTTLS required (SMTP_TLS=starttls), no AUTH"},
		{map[string]string{"SMTP_TLS": "none"}, "smtp transport: mail goes to localhost:1025, plaintext (SMTP_TLS=none), no AUTH"},
		{map[string]string{"SMTP_TLS": "tls", "SMTP_HOST": "relay.example.com", "SMTP_USERNAME": "postbox", "SMTP_PASSWORD": secret},
			"smtp transport: mail goes to relay.example.com:465, implicit TLS (SMTP_TLS=tls), AUTH configured"},
		{map[string]string{"SMTP_TLS": "starttls", "SMTP_PORT": "2525"}, "mail goes to localhost:2525, STARTTLS required"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			t.Parallel()
			cfg, err := ConfigFromEnv(envLookup(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			logger, logs := newLogger()
			newMailer(t, cfg, logger)
			if boot := logs.lines(slog.LevelInfo, tc.want); len(boot) != 1 {
				t.Fatalf("want one info line saying %q, got:\n%s", tc.want, logs)
			}
			if strings.Contains(logs.String(), secret) {
				t.Fatalf("the boot log names a credential:\n%s", logs)
			}
		})
	}
}

// TestDialErrorNamesTheSettings: a first send that finds no relay where
// the settings point names the settings that point there.
func TestDialErrorNamesTheSettings(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // nothing listens there now
	m := newMailer(t, Config{Host: "127.0.0.1", Port: port, Mode: ModeNone, From: "a@example.com", AppEnv: "test"}, nil)
	err = m.Send(testCtx(t), testMessage("row-1"))
	for _, want := range []string{"127.0.0.1:" + strconv.Itoa(port), ": dial: ", "SMTP_HOST:SMTP_PORT", "SMTP_TLS"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Send to a port nothing listens on = %v, want it to name %q", err, want)
		}
	}
}
