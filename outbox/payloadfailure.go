package outbox

import "strings"

// payloadErrorPrefix begins every error that fails a row for its payload:
// the decoder refused it (a wrong type, a missing or malformed field, a
// key spelled other than exactly). A sealed field that does not open is
// not one: a requeue after the key is added sends it.
const payloadErrorPrefix = "decode payload: "

// FailedForPayload reports whether lastError, a failed row's last_error,
// says its payload can never be sent. A requeue sends the same payload
// and fails the same way: only a corrected row, inserted anew, helps.
func FailedForPayload(lastError string) bool {
	return strings.HasPrefix(lastError, payloadErrorPrefix)
}

// CorrectedRowFix is the fix for a row that failed for its payload.
const CorrectedRowFix = "send a corrected row: its payload can never be sent as written, and a requeue would fail the same way; " +
	"insert a new row with the payload fixed (the error names the field)"
