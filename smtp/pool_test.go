package smtp

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
)

func TestSend_ReusesConnections(t *testing.T) {
	t.Parallel()
	bundle, files := newBundle(t)
	sink := startSink(t, smtpsink.Options{TLSConfig: bundle.ServerConfig(), Users: map[string]string{"postbox": "pw"}})
	cfg := sinkConfig(sink, ModeSTARTTLS)
	cfg.CAFile, cfg.Username, cfg.Password = files.CA, "postbox", "pw"
	m := newMailer(t, cfg, nil)

	t.Run("sequential", func(t *testing.T) {
		for i := range 5 {
			if err := m.Send(testCtx(t), testMessage(fmt.Sprintf("seq-%d", i))); err != nil {
				t.Fatal(err)
			}
		}
		if sink.Len() != 5 || sink.Connections() != 1 {
			t.Fatalf("%d messages over %d connections; want 5 over 1", sink.Len(), sink.Connections())
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		const workers, each = 8, 25
		var wg sync.WaitGroup
		errs := make(chan error, workers*each)
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					errs <- m.Send(testCtx(t), testMessage(fmt.Sprintf("c-%d-%d", w, i)))
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if got := sink.Len(); got != 5+workers*each {
			t.Fatalf("%d messages; want %d", got, 5+workers*each)
		}
		// A Send dials only when every pooled session is busy, so never
		// more sessions than concurrent senders.
		if c := sink.Connections(); c > workers {
			t.Fatalf("%d connections for %d concurrent senders", c, workers)
		}
		for row, n := range sink.CountByRowID() {
			if n != 1 {
				t.Fatalf("row %s delivered %d times", row, n)
			}
		}
	})
}

// The relay closes a pooled connection while it is idle (a restart, an
// idle timeout). The next Send notices before handing anything over and
// transparently uses a fresh connection.
func TestSend_ReplacesDeadPooledConnection(t *testing.T) {
	t.Parallel()
	bundle, files := newBundle(t)
	for _, mode := range []Mode{ModeNone, ModeSTARTTLS, ModeTLS} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			opts := smtpsink.Options{}
			if mode != ModeNone {
				opts.TLSConfig, opts.ImplicitTLS = bundle.ServerConfig(), mode == ModeTLS
			}
			sink := startSink(t, opts)
			cfg := sinkConfig(sink, mode)
			cfg.CAFile = files.CA
			m := newMailer(t, cfg, nil)

			if err := m.Send(testCtx(t), testMessage("row-1")); err != nil {
				t.Fatal(err)
			}
			if n := sink.DropConnections(); n != 1 {
				t.Fatalf("dropped %d connections; want the pooled one", n)
			}
			if err := m.Send(testCtx(t), testMessage("row-2")); err != nil {
				t.Fatalf("send on a dead pooled connection was not retried: %v", err)
			}
			if sink.Len() != 2 || sink.Connections() != 2 {
				t.Fatalf("%d messages over %d connections; want 2 over 2", sink.Len(), sink.Connections())
			}
		})
	}
}

func TestPool_IdleTimeoutAndClose(t *testing.T) {
	t.Parallel()
	sink := startSink(t, smtpsink.Options{})
	cfg := sinkConfig(sink, ModeNone)
	cfg.IdleTimeout = 50 * time.Millisecond
	m := newMailer(t, cfg, nil)

	if err := m.Send(testCtx(t), testMessage("row-1")); err != nil {
		t.Fatal(err)
	}
	eventually.Until(t, "the idle connection closed after IdleTimeout (50 ms)", time.Minute, func() bool { return idle(m) == 0 })

	if err := m.Send(testCtx(t), testMessage("row-2")); err != nil {
		t.Fatal(err)
	}
	m.Close()
	if idle(m) != 0 {
		t.Fatal("Close left idle connections")
	}
	if err := m.Send(testCtx(t), testMessage("row-3")); err != nil {
		t.Fatalf("Send after Close: %v", err)
	}
	if idle(m) != 0 {
		t.Fatal("a closed Mailer pooled a connection")
	}
	if sink.Connections() != 3 {
		t.Fatalf("%d connections; want 3 (expired, closed, unpooled)", sink.Connections())
	}
}

func TestPool_MaxIdleNegativeDisablesReuse(t *testing.T) {
	t.Parallel()
	sink := startSink(t, smtpsink.Options{})
	cfg := sinkConfig(sink, ModeNone)
	cfg.MaxIdle = -1
	m := newMailer(t, cfg, nil)
	for i := range 3 {
		if err := m.Send(testCtx(t), testMessage(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if sink.Connections() != 3 {
		t.Fatalf("%d connections; want one per message", sink.Connections())
	}
}

func idle(m *Mailer) int {
	m.pool.mu.Lock()
	defer m.pool.mu.Unlock()
	return len(m.pool.idle)
}
