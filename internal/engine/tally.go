package engine

import (
	"fmt"

	"github.com/postbox/postbox/internal/engine/pgtext"
)

// maxTallyIDs caps the row ids a Tally keeps per list, so a shift's River
// job output stays small however much it did.
const maxTallyIDs = 50

// maxTallyErrors caps the distinct error texts a Tally keeps.
const maxTallyErrors = 5

// Tally counts what a Lane, a drain or a pass did. It is the River job's
// recorded output (river.RecordOutput), so River UI answers "what did this
// shift do?", and the shape is the same for every outbox.
type Tally struct {
	Claims     int `json:"claims"`                // claim statements run
	Claimed    int `json:"claimed"`               // rows the claims took (each one attempt)
	Started    int `json:"started"`               // rows that got an attempt (a send, a POST)
	Sent       int `json:"sent"`                  // delivered: email dispatched, webhook 2xx
	Skipped    int `json:"skipped,omitempty"`     // email rows the renderer declined
	Events     int `json:"events,omitempty"`      // webhook_outbox rows fanned out into events
	Failed     int `json:"failed"`                // marked failed for good
	Retried    int `json:"retried"`               // marked for a later retry
	Released   int `json:"released"`              // claimed but not started: due again at once
	Stale      int `json:"stale"`                 // CAS marks dropped: a sibling resolved the row first
	MarkErrors int `json:"mark_errors,omitempty"` // marks that could not run; those rows wait out their lease
	Panics     int `json:"panics,omitempty"`      // recovered panics; each row involved was recorded

	SentIDs   []string `json:"sent_ids,omitempty"`   // the first rows sent, for the console's links
	FailedIDs []string `json:"failed_ids,omitempty"` // the first rows failed or retried
	Errors    []string `json:"errors,omitempty"`     // the first distinct errors and panic values
}

// Add adds o into t.
func (t *Tally) Add(o Tally) {
	t.Claims += o.Claims
	t.Claimed += o.Claimed
	t.Started += o.Started
	t.Sent += o.Sent
	t.Skipped += o.Skipped
	t.Events += o.Events
	t.Failed += o.Failed
	t.Retried += o.Retried
	t.Released += o.Released
	t.Stale += o.Stale
	t.MarkErrors += o.MarkErrors
	t.Panics += o.Panics
	t.SentIDs = appendCapped(t.SentIDs, o.SentIDs, maxTallyIDs)
	t.FailedIDs = appendCapped(t.FailedIDs, o.FailedIDs, maxTallyIDs)
	for _, e := range o.Errors {
		t.NoteError(e)
	}
}

// NoteError keeps msg among the first distinct errors, capped like a
// last_error (pgtext.LastError): it is recorded in the River job's output.
func (t *Tally) NoteError(msg string) {
	if len(t.Errors) >= maxTallyErrors {
		return
	}
	msg = pgtext.LastError(msg)
	for _, e := range t.Errors {
		if e == msg {
			return
		}
	}
	t.Errors = append(t.Errors, msg)
}

// Err is the error the River job reports for a Lane run that recovered
// panics, or nil: the rows are recorded, but River UI must show the job
// errored so someone looks.
func (t Tally) Err() error {
	if t.Panics == 0 {
		return nil
	}
	first := ""
	if len(t.Errors) > 0 {
		first = ": " + t.Errors[0]
	}
	return fmt.Errorf("%d panic(s) recovered, their rows recorded%s", t.Panics, first)
}

// Busy reports whether the tally records any work.
func (t Tally) Busy() bool {
	return t.Claimed > 0 || t.Panics > 0 || t.MarkErrors > 0
}

func appendCapped(dst, src []string, n int) []string {
	if room := n - len(dst); room > 0 {
		dst = append(dst, src[:min(room, len(src))]...)
	}
	return dst
}

// PanicError is a recovered panic as an error, so a row's mark can record it.
type PanicError struct{ Value any }

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }
