package receiver_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/postbox/postbox/webhook/receiver"
)

// ExampleVerifier checks one delivery as a receiver's handler would, on
// the raw body before parsing it. A real handler calls receiver.Verify
// (the clock is the receiver's own); the fixed clock here keeps the
// recorded request inside the tolerance.
func ExampleVerifier() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // the endpoint's secret, as postbox showed it once
	body := []byte(`{"type":"invoice.paid","timestamp":"2026-01-02T03:04:05.123456Z","data":{"amount":4200,"invoice_id":"in_1"}}`)
	header := http.Header{}
	header.Set(receiver.HeaderID, "01a236de-4891-7832-a05e-5ea4c91dd377") // the id the enqueue returned
	header.Set(receiver.HeaderTimestamp, "1767323045")
	header.Set(receiver.HeaderSignature, "v1,18yANj2w1di8C1/tX5uM6sWjdRCH+HooSDzBr+41Ht8=")

	v := receiver.Verifier{Secret: secret, Now: func() time.Time { return time.Unix(1767323045+30, 0) }}
	fmt.Println("genuine:", v.Verify(header, body))

	forged := []byte(strings.Replace(string(body), "4200", "1", 1))
	err := v.Verify(header, forged)
	fmt.Println("forged refused:", errors.Is(err, receiver.ErrNoMatchingSignature))

	late := receiver.Verifier{Secret: secret, Now: func() time.Time { return time.Unix(1767323045+3600, 0) }}
	err = late.Verify(header, body)
	fmt.Println("replayed an hour later refused:", errors.Is(err, receiver.ErrTimestampTooOld))
	// Output:
	// genuine: <nil>
	// forged refused: true
	// replayed an hour later refused: true
}
