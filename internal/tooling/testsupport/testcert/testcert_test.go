package testcert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"testing"
	"time"
)

func TestBundle_HandshakeVerifiesForLoopbackNames(t *testing.T) {
	t.Parallel()
	b, err := New()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", b.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				_ = c.(*tls.Conn).Handshake()
			}()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())

	for _, name := range []string{"localhost", "127.0.0.1"} {
		cfg := b.ClientConfig()
		cfg.ServerName = name
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		d := tls.Dialer{Config: cfg}
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", port))
		cancel()
		if err != nil {
			t.Fatalf("ServerName %s: %v", name, err)
		}
		c.Close()
	}

	// A different bundle's CA must not verify this server.
	other, err := New()
	if err != nil {
		t.Fatal(err)
	}
	cfg := other.ClientConfig()
	cfg.ServerName = "localhost"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d := tls.Dialer{Config: cfg}
	if c, err := d.DialContext(ctx, "tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Fatal("handshake verified against a foreign CA")
	}
}

func TestBundle_WriteFiles(t *testing.T) {
	t.Parallel()
	b, err := New()
	if err != nil {
		t.Fatal(err)
	}
	f, err := b.WriteFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.LoadX509KeyPair(f.Cert, f.Key); err != nil {
		t.Fatalf("cert/key files do not load: %v", err)
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(caPEM)
	if block == nil {
		t.Fatal("CA file is not PEM")
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil || !ca.IsCA {
		t.Fatalf("CA file: IsCA=%v err=%v", ca != nil && ca.IsCA, err)
	}
	if fi, err := os.Stat(f.Key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", fi.Mode().Perm(), err)
	}
}
