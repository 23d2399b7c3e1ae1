package mailevents

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"
)

// SNSOptions is how the SES endpoint reaches Amazon SNS: the signing
// certificates it fetches and the subscription confirmations it sends.
type SNSOptions struct {
	// URLAllowed decides whether a SigningCertURL or SubscribeURL may be
	// fetched. Nil means Amazon SNS's own hosts only: https, on
	// sns.<region>.amazonaws.com (or .amazonaws.com.cn). This is the
	// trust hook: a test allows its loopback TLS server here, never
	// production.
	URLAllowed func(*url.URL) bool
	// Client makes those requests; nil means http.Client with
	// FetchTimeout. Its own timeout, if any, applies as well.
	Client *http.Client
	// FetchTimeout bounds each request; 0 means 10 s.
	FetchTimeout time.Duration
}

var snsHostRE = regexp.MustCompile(`^sns\.[a-z0-9-]+\.amazonaws\.com(\.cn)?$`)

// Errors of SNS verification; the endpoint answers 403 for any of them.
var (
	ErrSNSSignature = errors.New("SNS message signature does not verify")
	ErrSNSCertURL   = errors.New("SNS URL is not on an Amazon SNS host")
)

// snsMessage is an SNS HTTP(S) delivery: a Notification, or a
// SubscriptionConfirmation / UnsubscribeConfirmation.
type snsMessage struct {
	Type             string `json:"Type"`
	MessageID        string `json:"MessageId"`
	Token            string `json:"Token"`
	TopicArn         string `json:"TopicArn"`
	Subject          string `json:"Subject"`
	Message          string `json:"Message"`
	SubscribeURL     string `json:"SubscribeURL"`
	Timestamp        string `json:"Timestamp"`
	SignatureVersion string `json:"SignatureVersion"`
	Signature        string `json:"Signature"`
	SigningCertURL   string `json:"SigningCertURL"`
}

// hasSubject tells an absent Subject from an empty one: only a present
// one is signed.
type snsSubjectProbe struct {
	Subject *string `json:"Subject"`
}

// stringToSign is SNS's canonical form: each signed field's name and
// value on lines of their own, in this order, Subject only when the
// message has one.
func (m snsMessage) stringToSign(hasSubject bool) (string, error) {
	var fields [][2]string
	switch m.Type {
	case "Notification":
		fields = append(fields, [2]string{"Message", m.Message}, [2]string{"MessageId", m.MessageID})
		if hasSubject {
			fields = append(fields, [2]string{"Subject", m.Subject})
		}
		fields = append(fields, [2]string{"Timestamp", m.Timestamp}, [2]string{"TopicArn", m.TopicArn}, [2]string{"Type", m.Type})
	case "SubscriptionConfirmation", "UnsubscribeConfirmation":
		fields = [][2]string{{"Message", m.Message}, {"MessageId", m.MessageID}, {"SubscribeURL", m.SubscribeURL},
			{"Timestamp", m.Timestamp}, {"Token", m.Token}, {"TopicArn", m.TopicArn}, {"Type", m.Type}}
	default:
		return "", fmt.Errorf("unknown SNS message type %q", m.Type)
	}
	var b strings.Builder
	for _, f := range fields {
		b.WriteString(f[0])
		b.WriteByte('\n')
		b.WriteString(f[1])
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// snsVerifier verifies SNS signatures, caching the certificates it
// fetched by URL (SNS rotates them rarely; each is fetched once).
type snsVerifier struct {
	opts   SNSOptions
	client *http.Client
	// now is the clock a certificate's validity is checked against:
	// time.Now, but for a test that lets a cached certificate expire.
	now func() time.Time

	mu    sync.Mutex
	certs map[string]*x509.Certificate
}

const maxCachedCerts = 16

func newSNSVerifier(opts SNSOptions) *snsVerifier {
	if opts.URLAllowed == nil {
		opts.URLAllowed = allowedURL
	}
	if opts.FetchTimeout <= 0 {
		opts.FetchTimeout = 10 * time.Second
	}
	client := opts.Client
	if client == nil {
		client = &http.Client{Timeout: opts.FetchTimeout}
	}
	// Redirects are not followed: the host that was checked is the host
	// that answers.
	c := *client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &snsVerifier{opts: opts, client: &c, now: time.Now, certs: map[string]*x509.Certificate{}}
}

// verify checks m's signature against the certificate at its
// SigningCertURL, which must be allowed.
func (v *snsVerifier) verify(ctx context.Context, m snsMessage, hasSubject bool) error {
	var alg x509.SignatureAlgorithm
	switch m.SignatureVersion {
	case "1":
		alg = x509.SHA1WithRSA
	case "2":
		alg = x509.SHA256WithRSA
	default:
		return fmt.Errorf("%w: SignatureVersion %q is neither 1 nor 2", ErrSNSSignature, m.SignatureVersion)
	}
	sig, err := base64.StdEncoding.DecodeString(m.Signature)
	if err != nil || len(sig) == 0 {
		return fmt.Errorf("%w: the signature is not base64", ErrSNSSignature)
	}
	signed, err := m.stringToSign(hasSubject)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSNSSignature, err)
	}
	cert, err := v.cert(ctx, m.SigningCertURL)
	if err != nil {
		return err
	}
	if err := cert.CheckSignature(alg, []byte(signed), sig); err != nil {
		return fmt.Errorf("%w: %w", ErrSNSSignature, err)
	}
	return nil
}

// allowed parses raw and applies the trust rule.
func (v *snsVerifier) allowed(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || !v.opts.URLAllowed(u) {
		return nil, fmt.Errorf("%w: %q", ErrSNSCertURL, raw)
	}
	return u, nil
}

func (v *snsVerifier) cert(ctx context.Context, raw string) (*x509.Certificate, error) {
	u, err := v.allowed(raw)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	c, ok := v.certs[u.String()]
	v.mu.Unlock()
	// A cached certificate is used until its NotAfter, then fetched again
	// (and refused, if what comes back is still the expired one).
	if ok && v.now().Before(c.NotAfter) {
		return c, nil
	}
	body, err := v.get(ctx, u, 64<<10)
	if err != nil {
		return nil, fmt.Errorf("fetching the SNS signing certificate: %w", err)
	}
	block, _ := pem.Decode(body)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%w: the signing certificate is not PEM", ErrSNSSignature)
	}
	c, err = x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSNSSignature, err)
	}
	// CheckSignature looks at the key only: the validity window is checked
	// here, so a certificate that is not yet or no longer valid signs
	// nothing.
	if now := v.now(); now.Before(c.NotBefore) || now.After(c.NotAfter) {
		return nil, fmt.Errorf("%w: the signing certificate is not valid now", ErrSNSSignature)
	}
	v.mu.Lock()
	if len(v.certs) >= maxCachedCerts {
		clear(v.certs)
	}
	v.certs[u.String()] = c
	v.mu.Unlock()
	return c, nil
}

// confirm visits a SubscriptionConfirmation's SubscribeURL, which must be
// allowed like a certificate URL.
func (v *snsVerifier) confirm(ctx context.Context, raw string) error {
	u, err := v.allowed(raw)
	if err != nil {
		return err
	}
	_, err = v.get(ctx, u, 64<<10)
	return err
}

// get fetches u within FetchTimeout, reading at most limit bytes.
func (v *snsVerifier) get(ctx context.Context, u *url.URL, limit int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, v.opts.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := v.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u.Redacted(), resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, limit))
}
