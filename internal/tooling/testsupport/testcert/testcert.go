// Package testcert makes a throwaway certificate authority and a server
// certificate for the loopback names (localhost, 127.0.0.1, ::1) at run
// time, so tests can run real TLS with verification switched on, the way
// production runs it, instead of turning verification off.
//
// Nothing is cached or checked in: every Bundle has a fresh CA, so a test
// that trusts one Bundle's CA cannot accidentally trust another's.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Bundle is a CA and one leaf certificate it signed for the loopback names.
type Bundle struct {
	CAPEM   []byte // the CA certificate: what a client adds to its trusted roots
	CertPEM []byte // the leaf certificate
	KeyPEM  []byte // the leaf's private key, PKCS #8

	cert  tls.Certificate
	roots *x509.CertPool
}

// Files are the paths WriteFiles wrote.
type Files struct {
	CA   string // CA certificate PEM (for SMTP_CA_FILE)
	Cert string // leaf certificate PEM (for a server's --tls-cert)
	Key  string // leaf key PEM (for a server's --tls-key)
}

// New generates a CA and a leaf valid for localhost, 127.0.0.1 and ::1.
func New() (*Bundle, error) {
	now := time.Now()

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testcert: CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "postbox test CA"},
		NotBefore:             now.Add(-time.Hour), // tolerate a little clock skew
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("testcert: CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("testcert: parse CA: %w", err)
	}

	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testcert: leaf key: %w", err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "localhost"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, caCert, &leafKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("testcert: leaf certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(leafKey)
	if err != nil {
		return nil, fmt.Errorf("testcert: marshal leaf key: %w", err)
	}

	b := &Bundle{
		CAPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		roots:   x509.NewCertPool(),
	}
	b.roots.AddCert(caCert)
	b.cert, err = tls.X509KeyPair(b.CertPEM, b.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("testcert: key pair: %w", err)
	}
	return b, nil
}

// ServerConfig is a TLS server configuration presenting the leaf.
// Each call returns a new Config, so callers may modify it.
func (b *Bundle) ServerConfig() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{b.cert}, MinVersion: tls.VersionTLS12}
}

// ClientConfig is a TLS client configuration that trusts only this
// Bundle's CA. Each call returns a new Config.
func (b *Bundle) ClientConfig() *tls.Config {
	return &tls.Config{RootCAs: b.roots.Clone(), MinVersion: tls.VersionTLS12}
}

// WriteFiles writes the CA, leaf certificate and key as PEM files into dir
// (typically t.TempDir()) and returns their paths. The key file is 0600.
func (b *Bundle) WriteFiles(dir string) (Files, error) {
	f := Files{
		CA:   filepath.Join(dir, "ca.pem"),
		Cert: filepath.Join(dir, "cert.pem"),
		Key:  filepath.Join(dir, "key.pem"),
	}
	for _, w := range []struct {
		path string
		data []byte
		perm os.FileMode
	}{{f.CA, b.CAPEM, 0o644}, {f.Cert, b.CertPEM, 0o644}, {f.Key, b.KeyPEM, 0o600}} {
		if err := os.WriteFile(w.path, w.data, w.perm); err != nil {
			return Files{}, fmt.Errorf("testcert: %w", err)
		}
	}
	return f, nil
}

func serial() *big.Int {
	// 128 random bits, as RFC 5280 recommends; collisions would make two
	// bundles' certificates indistinguishable to a cache.
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic("testcert: crypto/rand failed: " + err.Error())
	}
	return n
}
