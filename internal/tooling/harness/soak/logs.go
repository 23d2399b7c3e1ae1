package soak

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"time"
)

// markEvent is a worker's log line saying a row's outcome was not recorded:
// the mark could not run (the row then waits out its lease) or was dropped as
// stale (the lease had expired and a sibling resolved the row). Either way
// the row's next attempt comes after a lease expiry, and a duplicate send may
// follow: that is the "lease expiry" of the redelivery semantics (see
// docs/design/outbox-transport.md, Redelivery semantics).
type markEvent struct {
	At    time.Time
	Row   string // email row id or webhook delivery id
	Stale bool   // dropped as stale (else: the mark failed to run)
	Msg   string
}

// workerLog is what one worker's log says.
type workerLog struct {
	marks  []markEvent
	panics []string
	errors int // lines at ERROR level
}

// readWorkerLog parses a worker's JSON log (slog). A process killed
// mid-line leaves a torn last line; lines that do not parse are skipped.
func readWorkerLog(path string) (workerLog, error) {
	var wl workerLog
	f, err := os.Open(path)
	if err != nil {
		return wl, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			if strings.Contains(string(line), "panic") {
				wl.panics = append(wl.panics, string(line))
			}
			continue
		}
		var rec struct {
			Time       time.Time `json:"time"`
			Level      string    `json:"level"`
			Msg        string    `json:"msg"`
			RowID      string    `json:"row_id"`
			DeliveryID string    `json:"delivery_id"`
		}
		if json.Unmarshal(line, &rec) != nil {
			continue
		}
		if rec.Level == "ERROR" {
			wl.errors++
		}
		if strings.Contains(rec.Msg, "panic") {
			wl.panics = append(wl.panics, string(line))
		}
		row := rec.RowID
		if row == "" {
			row = rec.DeliveryID
		}
		// "stale email mark dropped…", "email mark failed…", "stale
		// delivery mark dropped…", "delivery mark lost…".
		if row == "" || !strings.Contains(rec.Msg, "mark") {
			continue
		}
		stale := strings.HasPrefix(rec.Msg, "stale ")
		if stale || strings.Contains(rec.Msg, "mark failed") || strings.Contains(rec.Msg, "mark lost") {
			wl.marks = append(wl.marks, markEvent{At: rec.Time, Row: row, Stale: stale, Msg: rec.Msg})
		}
	}
	return wl, sc.Err()
}
