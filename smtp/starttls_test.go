package smtp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
)

// A relay that does not offer STARTTLS gets nothing past EHLO.
func TestStrictSTARTTLS_NoAdvertisement(t *testing.T) {
	t.Parallel()
	sink := startSink(t, smtpsink.Options{}) // no TLSConfig: STARTTLS not advertised
	logger, logs := newLogger()
	m := newMailer(t, sinkConfig(sink, ModeSTARTTLS), logger)

	err := m.Send(testCtx(t), testMessage("row-1"))
	if !errors.Is(err, ErrSTARTTLSRefused) {
		t.Fatalf("err = %v, want ErrSTARTTLSRefused", err)
	}
	assertTransient(t, err)
	// The setting to change, for a relay that is right without STARTTLS.
	for _, want := range []string{sink.Host(), strconv.Itoa(sink.Port()), "starttls", "SMTP_TLS=tls", "SMTP_TLS=none"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if n := sink.SawMailFrom(); n != 0 {
		t.Fatalf("the relay saw %d MAIL FROM; want none", n)
	}
	if sink.Len() != 0 {
		t.Fatal("a message was delivered in plaintext")
	}
	if len(logs.lines(slog.LevelError, "STARTTLS")) != 1 {
		t.Errorf("want one error-level log line about STARTTLS, got:\n%s", logs)
	}
}

// A man in the middle deletes STARTTLS from the EHLO reply of a relay that
// does offer it, and advertises AUTH in its place to harvest credentials.
// The client must refuse and say nothing beyond EHLO: no MAIL FROM, and
// above all no credentials.
func TestStrictSTARTTLS_MITMStripped(t *testing.T) {
	t.Parallel()
	bundle, files := newBundle(t)
	sink := startSink(t, smtpsink.Options{
		TLSConfig: bundle.ServerConfig(),
		Users:     map[string]string{"postbox": "s3cret-pw"},
	})
	cfg := sinkConfig(sink, ModeSTARTTLS)
	cfg.CAFile, cfg.Username, cfg.Password = files.CA, "postbox", "s3cret-pw"

	// Control: without the attacker the same configuration delivers, so the
	// refusal below is the stripping's doing.
	direct := newMailer(t, cfg, nil)
	if err := direct.Send(testCtx(t), testMessage("control")); err != nil {
		t.Fatalf("control send without MITM: %v", err)
	}
	mailFromBefore := sink.SawMailFrom()

	proxy := startStripProxy(t, sink.Addr())
	cfg.Port = proxy.port
	m := newMailer(t, cfg, nil)
	err := m.Send(testCtx(t), testMessage("row-1"))
	if !errors.Is(err, ErrSTARTTLSRefused) {
		t.Fatalf("err = %v, want ErrSTARTTLSRefused", err)
	}
	assertTransient(t, err)
	if n := sink.SawMailFrom() - mailFromBefore; n != 0 {
		t.Fatalf("the relay saw %d MAIL FROM through the MITM; want none", n)
	}
	if !proxy.stripped() {
		t.Fatal("the proxy never saw a STARTTLS advertisement to strip")
	}
	sent := proxy.clientBytes()
	if !strings.HasPrefix(sent, "EHLO ") {
		t.Fatalf("client sent %q; want it to start with EHLO", sent)
	}
	for _, forbidden := range []string{"MAIL", "RCPT", "DATA", "AUTH", "s3cret", base64Plain("postbox", "s3cret-pw")} {
		if strings.Contains(sent, forbidden) {
			t.Fatalf("client sent %q in plaintext: %q", forbidden, sent)
		}
	}
}

func TestSTARTTLS_CertificateAndAUTH(t *testing.T) {
	t.Parallel()
	bundle, files := newBundle(t)
	_, foreign := newBundle(t) // a CA that did not sign the relay's certificate

	cases := []struct {
		name      string
		caFile    string
		delivered bool
	}{
		{"trusted through SMTP_CA_FILE", files.CA, true},
		{"untrusted: system roots only", "", false},
		{"untrusted: another CA in SMTP_CA_FILE", foreign.CA, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sink := startSink(t, smtpsink.Options{
				TLSConfig: bundle.ServerConfig(),
				Users:     map[string]string{"postbox": "s3cret-pw"},
			})
			cfg := sinkConfig(sink, ModeSTARTTLS)
			cfg.Host = "localhost" // verified against the certificate's DNS name
			cfg.CAFile, cfg.Username, cfg.Password = tc.caFile, "postbox", "s3cret-pw"
			m := newMailer(t, cfg, nil)

			err := m.Send(testCtx(t), testMessage("row-1"))
			if !tc.delivered {
				if !errors.Is(err, ErrSTARTTLSRefused) {
					t.Fatalf("err = %v, want ErrSTARTTLSRefused", err)
				}
				if sink.SawMailFrom() != 0 {
					t.Fatal("MAIL FROM sent over an unverified connection")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := sink.Messages()
			if len(got) != 1 || !got[0].TLS || got[0].AuthUser != "postbox" {
				t.Fatalf("received %+v; want one message over TLS, authenticated as postbox", got)
			}
		})
	}
}

// Credentials configured, AUTH not advertised: send without AUTH, warn
// naming the host, and let the relay decide.
func TestSTARTTLS_AUTHConfiguredNotAdvertised(t *testing.T) {
	t.Parallel()
	bundle, files := newBundle(t)
	sink := startSink(t, smtpsink.Options{TLSConfig: bundle.ServerConfig()}) // no Users: no AUTH
	cfg := sinkConfig(sink, ModeSTARTTLS)
	cfg.CAFile, cfg.Username, cfg.Password = files.CA, "postbox", "s3cret-pw"
	logger, logs := newLogger()
	m := newMailer(t, cfg, logger)

	if err := m.Send(testCtx(t), testMessage("row-1")); err != nil {
		t.Fatal(err)
	}
	if got := sink.Messages(); len(got) != 1 || got[0].AuthUser != "" || !got[0].TLS {
		t.Fatalf("received %+v", got)
	}
	if len(logs.lines(slog.LevelWarn, "AUTH", "host="+sink.Host())) == 0 {
		t.Fatalf("no warning naming the host; logs:\n%s", logs)
	}
	if strings.Contains(logs.String(), "s3cret-pw") {
		t.Fatal("the password reached the log")
	}
}

func base64Plain(user, pass string) string {
	// The AUTH PLAIN initial response, as it would appear on the wire.
	return strings.TrimRight(encodeStd("\x00"+user+"\x00"+pass), "=")
}

// stripProxy is a man in the middle: it relays TCP between the client and
// the relay and, in every EHLO reply, replaces the STARTTLS line with an
// AUTH advertisement.
type stripProxy struct {
	port int

	mu        sync.Mutex
	fromCli   bytes.Buffer
	didStrip  bool
	openConns []net.Conn
}

func startStripProxy(t *testing.T, upstream string) *stripProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stripProxy{port: ln.Addr().(*net.TCPAddr).Port}
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.openConns {
			c.Close()
		}
	})
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.DialTimeout("tcp", upstream, 5*time.Second)
			if err != nil {
				client.Close()
				continue
			}
			deadline := time.Now().Add(testTimeout)
			client.SetDeadline(deadline)
			server.SetDeadline(deadline)
			p.mu.Lock()
			p.openConns = append(p.openConns, client, server)
			p.mu.Unlock()
			go p.clientToServer(client, server)
			go p.serverToClient(server, client)
		}
	}()
	return p
}

func (p *stripProxy) clientToServer(client, server net.Conn) {
	defer server.Close()
	buf := make([]byte, 4096)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			p.mu.Lock()
			p.fromCli.Write(buf[:n])
			p.mu.Unlock()
			if _, werr := server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *stripProxy) serverToClient(server, client net.Conn) {
	defer client.Close()
	r := bufio.NewReader(server)
	var reply []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		reply = append(reply, line)
		if len(line) >= 4 && line[3] == '-' {
			continue // a multi-line reply continues
		}
		if _, err := io.WriteString(client, p.strip(reply)); err != nil {
			return
		}
		reply = nil
	}
}

// strip swaps STARTTLS for AUTH in a (possibly multi-line) reply and
// repairs the continuation markers so the reply stays well-formed.
func (p *stripProxy) strip(reply []string) string {
	kept := reply[:0:0]
	for _, l := range reply {
		if len(l) > 4 && strings.EqualFold(strings.TrimSpace(l[4:]), "STARTTLS") {
			p.mu.Lock()
			p.didStrip = true
			p.mu.Unlock()
			kept = append(kept, l[:4]+"AUTH PLAIN LOGIN\r\n")
			continue
		}
		kept = append(kept, l)
	}
	var b strings.Builder
	for i, l := range kept {
		sep := "-"
		if i == len(kept)-1 {
			sep = " "
		}
		b.WriteString(l[:3] + sep + l[4:])
	}
	return b.String()
}

func (p *stripProxy) stripped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.didStrip
}

func (p *stripProxy) clientBytes() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fromCli.String()
}
