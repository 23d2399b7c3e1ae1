package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks headers (https://www.standardwebhooks.com).
const (
	// HeaderID carries the event id. It is the same on every attempt and on
	// every endpoint's copy, so a receiver can dedupe at-least-once delivery.
	HeaderID = "webhook-id"
	// HeaderTimestamp is the attempt's Unix time in seconds, fresh per
	// attempt: receivers reject signatures older than their tolerance.
	HeaderTimestamp = "webhook-timestamp"
	// HeaderSignature is "v1," + base64(HMAC-SHA256(key, id.timestamp.body)).
	HeaderSignature = "webhook-signature"
)

// Secret sizes: Standard Webhooks asks for 24 to 64 random bytes.
const (
	secretPrefix   = "whsec_"
	minSecretBytes = 24
	maxSecretBytes = 64
	newSecretBytes = 32
)

// NewSecret returns a fresh signing secret: whsec_ + base64 of 32 random
// bytes.
func NewSecret() (string, error) {
	b := make([]byte, newSecretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("webhook: generate secret: %w", err)
	}
	return secretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// ValidateSecret checks that s is whsec_ + standard base64 of 24–64 bytes.
// The error never repeats the secret.
func ValidateSecret(s string) error {
	_, err := secretKey(s)
	return err
}

func secretKey(s string) ([]byte, error) {
	enc, ok := strings.CutPrefix(s, secretPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: secret must start with %q", ErrInvalidEndpoint, secretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, fmt.Errorf("%w: secret after %q is not standard base64", ErrInvalidEndpoint, secretPrefix)
	}
	if len(key) < minSecretBytes || len(key) > maxSecretBytes {
		return nil, fmt.Errorf("%w: secret key is %d bytes, must be %d to %d",
			ErrInvalidEndpoint, len(key), minSecretBytes, maxSecretBytes)
	}
	return key, nil
}

// Sign returns the webhook-signature header value for one attempt: "v1,"
// followed by the base64 HMAC-SHA256, keyed by the secret's bytes, of
// msgID + "." + Unix seconds of ts + "." + body.
func Sign(secret, msgID string, ts time.Time, body []byte) (string, error) {
	key, err := secretKey(secret)
	if err != nil {
		return "", err
	}
	return sign(key, msgID, ts, body), nil
}

func sign(key []byte, msgID string, ts time.Time, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(msgID))
	mac.Write([]byte{'.'})
	mac.Write(strconv.AppendInt(nil, ts.Unix(), 10))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}
