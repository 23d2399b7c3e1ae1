package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/operator/backlog"
)

// A row that failed for its payload (the decoder refused it) is never
// offered a requeue, which would send the same payload and fail the same
// way: the listing says to send a corrected row. A row that failed for
// anything else keeps the requeue.
func TestFailedEmailForItsPayloadSuggestsACorrectedRow(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 9, 1, 10, 30, 15, 0, time.UTC)
	payload := backlog.Failed{Table: "email_outbox", ID: "row-1", CreatedAt: at, Attempts: 1, What: "raw to ?",
		Error: "decode payload: json: cannot unmarshal array into Go struct field Payload.to of type string"}
	relay := backlog.Failed{Table: "email_outbox", ID: "row-2", CreatedAt: at, Attempts: 8, What: "raw to ada@example.com",
		Error: "gave up after 8 attempts: 451 try later"}
	for _, tc := range []struct {
		name        string
		rows        []backlog.Failed
		requeue     bool
		correctedTo bool
	}{
		{"payload only", []backlog.Failed{payload}, false, true},
		{"relay only", []backlog.Failed{relay}, true, false},
		{"both", []backlog.Failed{payload, relay}, true, true},
	} {
		var out bytes.Buffer
		printFailed(&out, tc.rows)
		s := out.String()
		if got := strings.Contains(s, "worker requeue email <id>"); got != tc.requeue {
			t.Errorf("%s: suggests a requeue %v, want %v:\n%s", tc.name, got, tc.requeue, s)
		}
		if got := strings.Contains(s, "send a corrected row"); got != tc.correctedTo {
			t.Errorf("%s: says to send a corrected row %v, want %v:\n%s", tc.name, got, tc.correctedTo, s)
		}
	}
}
