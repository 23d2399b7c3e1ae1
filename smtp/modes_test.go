package smtp

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
)

func TestImplicitTLS(t *testing.T) {
	t.Parallel()
	bundle, files := newBundle(t)
	sink := startSink(t, smtpsink.Options{TLSConfig: bundle.ServerConfig(), ImplicitTLS: true})

	t.Run("trusted", func(t *testing.T) {
		cfg := sinkConfig(sink, ModeTLS)
		cfg.CAFile = files.CA
		if err := newMailer(t, cfg, nil).Send(testCtx(t), testMessage("row-1")); err != nil {
			t.Fatal(err)
		}
		if got := sink.Messages(); len(got) != 1 || !got[0].TLS {
			t.Fatalf("received %+v; want one message over TLS", got)
		}
	})
	t.Run("untrusted", func(t *testing.T) {
		before := sink.SawMailFrom()
		err := newMailer(t, sinkConfig(sink, ModeTLS), nil).Send(testCtx(t), testMessage("row-2"))
		assertTransient(t, err)
		if sink.SawMailFrom() != before {
			t.Fatal("MAIL FROM sent over an unverified connection")
		}
	})
}

func TestModeNone_Production(t *testing.T) {
	t.Parallel()
	sink := startSink(t, smtpsink.Options{})
	cfg := sinkConfig(sink, ModeNone)
	cfg.AppEnv = "production"
	logger, logs := newLogger()
	m := newMailer(t, cfg, logger)

	if len(logs.lines(slog.LevelWarn, "SMTP_TLS=none", "APP_ENV=production")) == 0 {
		t.Errorf("boot log does not warn about none in production:\n%s", logs)
	}
	for i := range 2 { // refused, and logged, every time
		err := m.Send(testCtx(t), testMessage("row-1"))
		if !errors.Is(err, ErrPlaintextForbidden) {
			t.Fatalf("send %d: err = %v, want ErrPlaintextForbidden", i, err)
		}
		assertTransient(t, err)
	}
	if sink.Connections() != 0 {
		t.Fatalf("the relay saw %d connections; want none", sink.Connections())
	}
	if n := len(logs.lines(slog.LevelError, "SMTP_TLS=none", "APP_ENV=production")); n != 2 {
		t.Fatalf("%d error-level lines naming SMTP_TLS and APP_ENV; want 2:\n%s", n, logs)
	}
}

func TestModeNone_Development(t *testing.T) {
	t.Parallel()
	for _, appEnv := range []string{"development", ""} {
		t.Run("APP_ENV="+appEnv, func(t *testing.T) {
			t.Parallel()
			sink := startSink(t, smtpsink.Options{})
			cfg := sinkConfig(sink, ModeNone)
			cfg.AppEnv = appEnv
			if err := newMailer(t, cfg, nil).Send(testCtx(t), testMessage("row-1")); err != nil {
				t.Fatal(err)
			}
			if got := sink.Messages(); len(got) != 1 || got[0].TLS {
				t.Fatalf("received %+v; want one plaintext message", got)
			}
		})
	}
}

// Plaintext AUTH is allowed to loopback, the one place where no network
// lies between us and the relay (a local Mailpit with --smtp-auth-file).
func TestModeNone_AUTHToLoopback(t *testing.T) {
	t.Parallel()
	sink := startSink(t, smtpsink.Options{Users: map[string]string{"dev": "devpw"}, AllowInsecureAuth: true})
	cfg := sinkConfig(sink, ModeNone)
	cfg.Username, cfg.Password = "dev", "devpw"
	if err := newMailer(t, cfg, nil).Send(testCtx(t), testMessage("row-1")); err != nil {
		t.Fatal(err)
	}
	if got := sink.Messages(); len(got) != 1 || got[0].AuthUser != "dev" {
		t.Fatalf("received %+v; want one message authenticated as dev", got)
	}
}

func TestConfig_NoPlaintextCredentialsToRemoteHost(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Host: "mail.example.com", Mode: ModeNone, Username: "u", Password: "p"}, nil)
	if err == nil || !strings.Contains(err.Error(), "SMTP_TLS=none") || !strings.Contains(err.Error(), "mail.example.com") {
		t.Fatalf("err = %v; want a config error naming SMTP_TLS=none and the host", err)
	}
	for _, host := range []string{"localhost", "127.0.0.1", "::1"} {
		if _, err := New(Config{Host: host, Mode: ModeNone, Username: "u", Password: "p"}, nil); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
}
