package soak

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func kill(s float64) event {
	return event{from: at(s), to: at(s), cause: CauseKill, label: CauseKill}
}

func TestExplain(t *testing.T) {
	restart := event{from: at(40), to: at(41), cause: CauseRestart, label: CauseRestart}
	stale := event{from: at(150), to: at(150), cause: CauseLeaseExpiry, label: CauseLeaseExpiry, lag: staleMarkLag}
	for _, tc := range []struct {
		name        string
		accepted    []time.Time
		events      []event
		unexplained int
		causes      []string
	}{
		{"sent once", []time.Time{at(10)}, []event{kill(11)}, 0, nil},
		{"kill right after the first send", []time.Time{at(10), at(80)}, []event{kill(10.2)}, 0, []string{CauseKill}},
		{"kill just before the acceptance was recorded", []time.Time{at(10), at(80)}, []event{kill(9)}, 0, []string{CauseKill}},
		{"kill long before the first send explains nothing", []time.Time{at(10), at(80)}, []event{kill(2)}, 1, []string{"UNEXPLAINED"}},
		{"kill after the resend explains nothing", []time.Time{at(10), at(80)}, []event{kill(81)}, 1, []string{"UNEXPLAINED"}},
		{"the restart overlaps", []time.Time{at(39), at(110)}, []event{restart}, 0, []string{CauseRestart}},
		{"one kill explains one duplicate, not two",
			[]time.Time{at(10), at(80), at(150)}, []event{kill(11)}, 1, []string{CauseKill, "UNEXPLAINED"}},
		{"two kills explain two duplicates",
			[]time.Time{at(10), at(80), at(150)}, []event{kill(11), kill(81)}, 0, []string{CauseKill, CauseKill}},
		{"the nearest event is named", []time.Time{at(39), at(110)}, []event{kill(90), restart}, 0, []string{CauseRestart}},
		{"a stale mark is logged after the resend", []time.Time{at(10), at(100)}, []event{stale}, 0, []string{CauseLeaseExpiry}},
		{"no event at all", []time.Time{at(10), at(80)}, nil, 1, []string{"UNEXPLAINED"}},
		{"a resend inside the lease is never explained", []time.Time{at(10), at(12)}, []event{kill(11)}, 1,
			[]string{"UNEXPLAINED: sent again 2s later, inside the lease"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rd RowDuplicates
			explain(&rd, tc.accepted, tc.events, at(0), tc.accepted[len(tc.accepted)-1], 10*time.Second)
			if rd.Duplicates != len(tc.accepted)-1 || rd.Unexplained != tc.unexplained ||
				strings.Join(rd.Causes, ",") != strings.Join(tc.causes, ",") {
				t.Errorf("got %d duplicates, %d unexplained, causes %q; want %d, %d, %q",
					rd.Duplicates, rd.Unexplained, rd.Causes, len(tc.accepted)-1, tc.unexplained, tc.causes)
			}
		})
	}
}

func TestProblemsFlagEveryBrokenPromise(t *testing.T) {
	ok := func() *Tally {
		return &Tally{Finished: true, EventsPerOutboxRow: map[int]int{1: 10}, PermanentPlanned: 2, PermanentAnswered: 2}
	}
	if p := ok().Problems(); len(p) != 0 {
		t.Fatalf("a clean tally has problems: %q", p)
	}
	for name, breakIt := range map[string]func(*Tally){
		"unfinished":        func(t *Tally) { t.Finished = false },
		"lost":              func(t *Tally) { t.Lost.EmailsSentNotSeen = 1 },
		"unexplained":       func(t *Tally) { t.Unexplained = []RowDuplicates{{Unexplained: 1}} },
		"failed, not 550":   func(t *Tally) { t.FailedNotPermanent = []string{"a"} },
		"550, not failed":   func(t *Tally) { t.PermanentNotFailed = []string{"a"} },
		"550 count":         func(t *Tally) { t.PermanentAnswered = 1 },
		"sent, not marked":  func(t *Tally) { t.AcceptedNotDispatched = []string{"a"} },
		"two events":        func(t *Tally) { t.EventsPerOutboxRow[2] = 1 },
		"bad signature":     func(t *Tally) { t.Receivers.BadSignatures = 1 },
		"phantom":           func(t *Tally) { t.Phantoms = 1 },
		"delivery failed":   func(t *Tally) { t.FailedDeliveries = []string{"d: HTTP 500"} },
		"restart failed":    func(t *Tally) { t.Restart = &Restart{Err: "pg_ctl"} },
		"panic in a worker": func(t *Tally) { t.WorkerPanics = []string{"panic"} },
	} {
		tl := ok()
		breakIt(tl)
		if len(tl.Problems()) == 0 {
			t.Errorf("%s: no problem reported", name)
		}
	}
	exhausted := ok()
	exhausted.FailedDeliveries, exhausted.FailedDeliveriesExhausted = []string{"d: HTTP 500 (gave up after 8 attempts)"}, 1
	if p := exhausted.Problems(); len(p) != 0 {
		t.Errorf("a delivery that exhausted its retries is reported, not a problem: %q", p)
	}
}

func TestReadWorkerLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "worker.log")
	log := `{"time":"2026-01-01T12:00:01Z","level":"WARN","msg":"email send failed; will retry","row_id":"r1"}
{"time":"2026-01-01T12:00:02Z","level":"ERROR","msg":"email mark failed; the row is retried when its lease expires","row_id":"r2"}
{"time":"2026-01-01T12:00:03Z","level":"WARN","msg":"stale email mark dropped: the row was resolved elsewhere","row_id":"r3"}
{"time":"2026-01-01T12:00:04Z","level":"ERROR","msg":"delivery mark lost; the delivery is attempted again when its lease expires","delivery_id":"d1"}
{"time":"2026-01-01T12:00:05Z","level":"WARN","msg":"stale delivery mark dropped: a sibling resolved the delivery first","delivery_id":"d2"}
{"time":"2026-01-01T12:00:06Z","level":"WARN","msg":"email failed; it waits for an operator's requeue","row_id":"r4"}
{"time":"2026-01-01T12:00:07Z","level":"ERROR","msg":"panic in webhook attempt","delivery_id":"d3"}
{"time":"2026-01-01T12:00:08Z","level":"WARN","msg":"email mark fai`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	wl, err := readWorkerLog(path)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range wl.marks {
		got = append(got, m.Row+map[bool]string{true: ":stale", false: ":lost"}[m.Stale])
	}
	if want := "r2:lost r3:stale d1:lost d2:stale"; strings.Join(got, " ") != want {
		t.Errorf("marks %q, want %q", got, want)
	}
	if len(wl.panics) != 1 || wl.errors != 3 {
		t.Errorf("%d panics, %d errors; want 1, 3", len(wl.panics), wl.errors)
	}
}

func TestMailFaults(t *testing.T) {
	m := newMailFaults(Faults{SMTPTransient: 0.5, SMTPHang: 0.2}, 1)
	m.setPermanent([]string{"perm"})
	msg := func(id string) []byte {
		return []byte("Message-ID: <" + id + "@postbox.test>\r\nSubject: x\r\n\r\nbody")
	}
	for range 20 {
		if m.hang(envelope(msg("perm"))) {
			t.Fatal("a permanent row was held: its first attempt must fail it")
		}
		if err := m.fault(envelope(msg("perm"))); err == nil || !strings.Contains(err.Error(), "550") {
			t.Fatalf("permanent row answered %v, want 550", err)
		}
	}
	held, transient := 0, 0
	for range 2000 {
		if m.hang(envelope(msg("row"))) {
			held++
			continue
		}
		if m.fault(envelope(msg("row"))) != nil {
			transient++
		}
	}
	// 20 % held and 50 % of all attempts answered 451, give or take.
	if held < 320 || held > 480 || transient < 900 || transient > 1100 {
		t.Errorf("%d held, %d × 451 of 2000; want about 400 and 1000", held, transient)
	}
	if m.attempts["row"] != 2000 || m.answered["perm"] != 20 || len(m.answered) != 1 {
		t.Errorf("counted %d attempts and 550s %v", m.attempts["row"], m.answered)
	}
}

func TestUUIDsAreV4AndSeeded(t *testing.T) {
	a, b := newLoad(rand.New(rand.NewPCG(7, 7)), 200, 10, 0.01), newLoad(rand.New(rand.NewPCG(7, 7)), 200, 10, 0.01)
	if a.emails[0] != b.emails[0] || len(a.permanent) != 2 {
		t.Fatalf("the seed does not reproduce the load, or %d permanent rows (want 2)", len(a.permanent))
	}
	if id := a.emails[0]; len(id) != 36 || id[14] != '4' || !strings.ContainsAny(id[19:20], "89ab") {
		t.Errorf("%q is not a version 4 UUID", id)
	}
}

func envelope(data []byte) smtpsink.Envelope { return smtpsink.Envelope{Data: data} }

// An email accepted once and later failed as possibly delivered is the
// accepted residual only when a crash (or the restart, or a lease expiry)
// came after the acceptance: that is how its mark was lost and the row
// claimed again.
func TestFollowedByCrash(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []event
		want   bool
	}{
		{"a kill after the acceptance", []event{kill(12)}, true},
		{"a kill just before the acceptance was recorded", []event{kill(9.9)}, true},
		{"only a kill long before", []event{kill(2)}, false},
		{"no event", nil, false},
	} {
		if got := followedByCrash(at(10), tc.events); got != tc.want {
			t.Errorf("%s: followedByCrash = %v, want %v", tc.name, got, tc.want)
		}
	}
}
