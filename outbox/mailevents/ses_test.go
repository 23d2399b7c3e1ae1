package mailevents

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbox/postbox/outbox"
)

const testTopic = "arn:aws:sns:eu-west-1:123456789012:ses-events"

// snsFake is a stand-in for Amazon SNS: a signing key, its certificate
// served over HTTPS on loopback, and a SubscribeURL that counts visits.
type snsFake struct {
	key      *rsa.PrivateKey
	tls      *httptest.Server
	certGets atomic.Int32
	confirms atomic.Int32

	// served are further bodies at /certs/{name} (servedCert, servedBody),
	// and servedGets counts their fetches.
	served     sync.Map // name → []byte
	servedGets atomic.Int32
}

func newSNSFake(t *testing.T) *snsFake {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "sns.eu-west-1.amazonaws.com"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	f := &snsFake{key: key}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /SimpleNotificationService-test.pem", func(w http.ResponseWriter, _ *http.Request) {
		f.certGets.Add(1)
		w.Write(certPEM)
	})
	mux.HandleFunc("GET /certs/{name}", func(w http.ResponseWriter, r *http.Request) {
		body, ok := f.served.Load(r.PathValue("name"))
		if !ok {
			http.NotFound(w, r)
			return
		}
		f.servedGets.Add(1)
		w.Write(body.([]byte))
	})
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("Action") == "ConfirmSubscription" {
			f.confirms.Add(1)
			w.Write([]byte("<ConfirmSubscriptionResponse/>"))
			return
		}
		http.NotFound(w, r)
	})
	f.tls = httptest.NewTLSServer(mux)
	t.Cleanup(f.tls.Close)
	return f
}

// options are the trust hook that lets the verifier reach the fake: its
// loopback host, and a client that trusts its certificate.
func (f *snsFake) options() SNSOptions {
	return SNSOptions{
		URLAllowed: func(u *url.URL) bool {
			return u.Scheme == "https" && u.Host == strings.TrimPrefix(f.tls.URL, "https://")
		},
		Client: f.tls.Client(),
	}
}

func (f *snsFake) certURL() string { return f.tls.URL + "/SimpleNotificationService-test.pem" }

// servedCert serves, at a URL of its own, a certificate for the fake's
// signing key valid from notBefore to notAfter, and returns the URL and
// the PEM.
func (f *snsFake) servedCert(t *testing.T, name string, notBefore, notAfter time.Time) (string, []byte) {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "sns.eu-west-1.amazonaws.com"},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &f.key.PublicKey, f.key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return f.servedBody(name, certPEM), certPEM
}

// servedBody serves body at /certs/name and returns its URL.
func (f *snsFake) servedBody(name string, body []byte) string {
	f.served.Store(name, body)
	return f.tls.URL + "/certs/" + name
}

// sign signs m as SNS does, with SignatureVersion version.
func (f *snsFake) sign(t *testing.T, m map[string]string, version string) []byte {
	t.Helper()
	m["SignatureVersion"] = version
	if _, ok := m["SigningCertURL"]; !ok {
		m["SigningCertURL"] = f.certURL()
	}
	msg := snsMessage{Type: m["Type"], MessageID: m["MessageId"], Token: m["Token"], TopicArn: m["TopicArn"],
		Subject: m["Subject"], Message: m["Message"], SubscribeURL: m["SubscribeURL"], Timestamp: m["Timestamp"]}
	_, hasSubject := m["Subject"]
	text, err := msg.stringToSign(hasSubject)
	if err != nil {
		t.Fatal(err)
	}
	var sig []byte
	if version == "1" {
		sum := sha1.Sum([]byte(text))
		sig, err = rsa.SignPKCS1v15(rand.Reader, f.key, crypto.SHA1, sum[:])
	} else {
		sum := sha256.Sum256([]byte(text))
		sig, err = rsa.SignPKCS1v15(rand.Reader, f.key, crypto.SHA256, sum[:])
	}
	if err != nil {
		t.Fatal(err)
	}
	m["Signature"] = base64.StdEncoding.EncodeToString(sig)
	return mustJSON(t, m)
}

// notification is an SNS Notification carrying an SES event.
func notification(id, sesEvent string) map[string]string {
	return map[string]string{
		"Type":           "Notification",
		"MessageId":      id,
		"TopicArn":       testTopic,
		"Message":        sesEvent,
		"Timestamp":      "2026-11-30T17:01:02.123Z",
		"UnsubscribeURL": "https://sns.eu-west-1.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=" + testTopic + ":1",
	}
}

// sesMail is the "mail" object of SES's notification contents; rowHeader
// "" leaves out X-Postbox-Row (SES sends headers only when configured to).
func sesMail(messageID, to, rowHeader string) string {
	headers := `{"name":"From","value":"billing@example.com"},{"name":"To","value":"` + to + `"},{"name":"Message-ID","value":"` + messageID + `"}`
	if rowHeader != "" {
		headers += `,{"name":"X-Postbox-Row","value":"` + rowHeader + `"}`
	}
	return `"mail":{"timestamp":"2026-11-30T17:00:00.000Z","source":"billing@example.com",
"sourceArn":"arn:aws:ses:eu-west-1:123456789012:identity/example.com","sendingAccountId":"123456789012",
"messageId":"0102017f-ses-` + strings.Trim(messageID, "<>") + `","destination":["` + to + `"],"headersTruncated":false,
"headers":[` + headers + `],
"commonHeaders":{"from":["billing@example.com"],"to":["` + to + `"],"messageId":"` + messageID + `","subject":"Invoice INV-42"}}`
}

func sesBounce(feedbackID, bounceType, to, messageID, rowHeader string) string {
	return `{"notificationType":"Bounce","bounce":{"feedbackId":"` + feedbackID + `","bounceType":"` + bounceType + `",
"bounceSubType":"General","bouncedRecipients":[{"emailAddress":"` + to + `","action":"failed","status":"5.1.1",
"diagnosticCode":"smtp; 550 5.1.1 user unknown"}],"timestamp":"2026-11-30T17:01:00.000Z","remoteMtaIp":"127.0.2.0",
"reportingMTA":"dsn; b224-13.smtp-out.eu-west-1.amazonses.com"},` + sesMail(messageID, to, rowHeader) + `}`
}

func sesComplaint(feedbackID, to, messageID string) string {
	return `{"eventType":"Complaint","complaint":{"feedbackId":"` + feedbackID + `","complaintSubType":null,
"complainedRecipients":[{"emailAddress":"` + to + `"}],"timestamp":"2026-11-30T18:00:00.000Z",
"userAgent":"ExampleCorp Feedback Loop (V0.01)","complaintFeedbackType":"abuse"},` + sesMail(messageID, to, "") + `}`
}

func sesDelivery(to, messageID string) string {
	return `{"notificationType":"Delivery","delivery":{"timestamp":"2026-11-30T17:00:01.000Z","processingTimeMillis":546,
"recipients":["` + to + `"],"smtpResponse":"250 ok:  Message 64111812 accepted","reportingMTA":"a8-70.smtp-out.amazonses.com",
"remoteMtaIp":"127.0.2.0"},` + sesMail(messageID, to, "") + `}`
}

// TestSES: the SES endpoint with SNS-signed SES notifications. A bad
// signature, an unsupported SignatureVersion, a topic not on the list, a
// certificate URL off the trusted hosts, a malformed body or Message and
// an oversized body change nothing; SignatureVersion 1 and 2 both verify;
// a bounce correlates by X-Postbox-Row, a complaint and a delivery by the
// Message-ID; a replay is recorded once; an unknown row is an orphan.
func TestSES(t *testing.T) {
	t.Parallel()
	sns := newSNSFake(t)
	f := newFixture(t, Settings{SNSTopicARNs: []string{testTopic}}, sns.options())
	row := f.sentRow("ada@example.com")
	msgID := "<" + row + "@example.com>"

	good := sns.sign(t, notification("n-1", sesBounce("fb-1", "Permanent", "ada@example.com", "<other@example.com>", row)), "1")
	tamperedMsg := notification("n-1", sesBounce("fb-1", "Permanent", "ada@example.com", "<other@example.com>", row))
	tampered := sns.sign(t, tamperedMsg, "1")
	tampered = []byte(strings.Replace(string(tampered), "ada@example.com", "eve@example.com", -1))
	foreignTopic := notification("n-2", sesBounce("fb-2", "Permanent", "ada@example.com", msgID, ""))
	foreignTopic["TopicArn"] = "arn:aws:sns:eu-west-1:999999999999:other"
	offHost := notification("n-3", sesBounce("fb-3", "Permanent", "ada@example.com", msgID, ""))
	offHost["SigningCertURL"] = "https://sns.eu-west-1.amazonaws.com.evil.example/cert.pem"
	notSES := sns.sign(t, notification("n-4", `{"hello":`), "2")

	bad := []struct {
		name string
		body []byte
		want int
	}{
		{"tampered after signing", tampered, http.StatusForbidden},
		{"SignatureVersion 3", sns.sign(t, notification("n-5", sesBounce("fb-5", "Permanent", "ada@example.com", msgID, "")), "3"), http.StatusForbidden},
		{"topic not on the list", sns.sign(t, foreignTopic, "1"), http.StatusForbidden},
		{"certificate off the trusted hosts", sns.sign(t, offHost, "1"), http.StatusForbidden},
		{"malformed body", []byte(`{"Type": "Notification", `), http.StatusBadRequest},
		{"not SNS", []byte(`{"RecordType":"Bounce"}`), http.StatusBadRequest},
		{"unknown SNS type", mustJSON(t, map[string]string{"Type": "Bogus", "MessageId": "x", "TopicArn": testTopic}), http.StatusBadRequest},
		{"Message is not an SES event", notSES, http.StatusBadRequest},
		{"oversized", oversized(), http.StatusRequestEntityTooLarge},
	}
	before := f.state()
	for _, tc := range bad {
		if code, body := f.post(ProviderSES, tc.body, nil, "", ""); code != tc.want {
			t.Errorf("%s: %d %q; want %d", tc.name, code, body, tc.want)
		}
		if got := f.state(); got != before {
			t.Fatalf("%s changed the database: %+v → %+v", tc.name, before, got)
		}
	}

	code, body := f.post(ProviderSES, good, nil, "", "")
	if code != http.StatusOK || answerOf(t, body) != (answer{Recorded: 1}) {
		t.Fatalf("v1 bounce: %d %q", code, body)
	}
	evs := f.events(row)
	if len(evs) != 1 || evs[0].BounceClass != outbox.BounceHard || evs[0].ProviderEventID != "bounce:fb-1:ada@example.com" ||
		!strings.Contains(evs[0].Detail, "5.1.1") {
		t.Fatalf("events %+v", evs)
	}
	if s, ok := f.suppression("ada@example.com"); !ok || s.Source != outbox.SourceHardBounce || s.SourceRow != row {
		t.Errorf("suppression %+v, %v", s, ok)
	}
	after := f.state()
	if code, body := f.post(ProviderSES, good, nil, "", ""); code != http.StatusOK || answerOf(t, body) != (answer{Duplicates: 1}) || f.state() != after {
		t.Fatalf("replay: %d %q", code, body)
	}
	if got := sns.certGets.Load(); got != 1 {
		t.Errorf("certificate fetched %d times; want once (cached), and never for a foreign topic or host", got)
	}

	// SignatureVersion 2, with a Subject (signed only when present).
	row2 := f.sentRow("bob@example.com")
	complaint := notification("n-6", sesComplaint("fb-6", "bob@example.com", "<"+row2+"@example.com>"))
	complaint["Subject"] = "Amazon SES Email Event Notification"
	if code, body := f.post(ProviderSES, sns.sign(t, complaint, "2"), nil, "", ""); code != http.StatusOK || answerOf(t, body) != (answer{Recorded: 1}) {
		t.Fatalf("v2 complaint: %d %q", code, body)
	}
	if s, ok := f.suppression("bob@example.com"); !ok || s.Source != outbox.SourceComplaint || s.SourceRow != row2 {
		t.Errorf("complaint suppression %+v, %v", s, ok)
	}
	if code, _ := f.post(ProviderSES, sns.sign(t, notification("n-7", sesDelivery("ada@example.com", msgID)), "2"), nil, "", ""); code != http.StatusOK {
		t.Fatal(code)
	}
	if evs := f.events(row); len(evs) != 2 || evs[1].Type != outbox.EventDelivered {
		t.Fatalf("delivery correlated by Message-ID: %+v", evs)
	}

	code, body = f.post(ProviderSES, sns.sign(t, notification("n-8", sesDelivery("x@example.com", "<0f0e0d0c-0000-4000-8000-000000000003@example.com>")), "2"), nil, "", "")
	if code != http.StatusOK || answerOf(t, body) != (answer{Recorded: 1, Orphans: 1}) || f.orphanCount(ProviderSES) != 1 {
		t.Fatalf("unknown row: %d %q", code, body)
	}
}

// TestSES_SubscriptionConfirmation: a signed confirmation is confirmed
// by visiting its SubscribeURL; one whose SubscribeURL is off the trusted
// hosts, or whose signature is bad, is refused without a visit.
func TestSES_SubscriptionConfirmation(t *testing.T) {
	t.Parallel()
	sns := newSNSFake(t)
	f := newFixture(t, Settings{SNSTopicARNs: []string{testTopic}}, sns.options())
	confirmation := func(subscribeURL string) map[string]string {
		return map[string]string{
			"Type": "SubscriptionConfirmation", "MessageId": "c-1", "Token": "2336412f37fb687f5d51e6e2425c464d",
			"TopicArn": testTopic, "Timestamp": "2026-11-30T17:00:00.000Z",
			"Message":      "You have chosen to subscribe to the topic " + testTopic + ".\nTo confirm the subscription, visit the SubscribeURL included in this message.",
			"SubscribeURL": subscribeURL,
		}
	}
	good := sns.tls.URL + "/?Action=ConfirmSubscription&TopicArn=" + testTopic + "&Token=2336412f37fb687f5d51e6e2425c464d"
	if code, body := f.post(ProviderSES, sns.sign(t, confirmation("https://evil.example/?Action=ConfirmSubscription"), "1"), nil, "", ""); code != http.StatusForbidden {
		t.Errorf("SubscribeURL off the trusted hosts: %d %q; want 403", code, body)
	}
	forged := sns.sign(t, confirmation(good), "1")
	forged = []byte(strings.Replace(string(forged), "c-1", "c-2", 1))
	if code, _ := f.post(ProviderSES, forged, nil, "", ""); code != http.StatusForbidden {
		t.Errorf("forged confirmation: %d; want 403", code)
	}
	if n := sns.confirms.Load(); n != 0 {
		t.Fatalf("%d confirmations sent for refused messages", n)
	}
	if code, body := f.post(ProviderSES, sns.sign(t, confirmation(good), "2"), nil, "", ""); code != http.StatusOK {
		t.Fatalf("confirmation: %d %q", code, body)
	}
	if n := sns.confirms.Load(); n != 1 {
		t.Errorf("%d confirmations sent; want 1", n)
	}
	if f.state() != (state{}) {
		t.Error("a subscription confirmation wrote events")
	}
}

// TestAllowedURL is the default trust rule for certificate and subscribe
// URLs: https on Amazon SNS's hosts, nothing else.
func TestAllowedURL(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]bool{
		"https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem":     true,
		"https://sns.cn-north-1.amazonaws.com.cn/SimpleNotificationService-abc.pem": true,
		"http://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem":      false,
		"https://sns.us-east-1.amazonaws.com.evil.example/x.pem":                    false,
		"https://evilsns.us-east-1.amazonaws.com/x.pem":                             false,
		"https://sns.us-east-1.amazonaws.com:8443/x.pem":                            false,
		"https://user:pw@sns.us-east-1.amazonaws.com/x.pem":                         false,
		"https://s3.amazonaws.com/x.pem":                                            false,
		"https://127.0.0.1/x.pem":                                                   false,
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := allowedURL(u); got != want {
			t.Errorf("allowedURL(%s) = %v; want %v", raw, got, want)
		}
	}
}
