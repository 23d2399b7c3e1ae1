package jobs

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/operator/story"
	"github.com/postbox/postbox/outbox"
)

// A shift's recorded output keeps the Tally's fields at the top level —
// what the console's job lookup reads (story.jobsFor) — and adds the
// console page of every row id it names.
func TestShiftOutputLinksTheConsole(t *testing.T) {
	t.Parallel()
	if story.ShiftKind != (ShiftArgs{}).Kind() {
		t.Fatalf("story.ShiftKind = %q, the shift kind is %q", story.ShiftKind, ShiftArgs{}.Kind())
	}
	for _, tc := range []struct {
		lane         string
		sent, failed []string
	}{
		{LaneEmail, []string{"/console/email/e1", "/console/email/e2"}, []string{"/console/email/e3"}},
		{LaneWebhook, []string{"/console/find/e1", "/console/find/e2"}, []string{"/console/find/e3"}},
	} {
		b, err := json.Marshal(shiftOutput(tc.lane, outbox.Tally{Sent: 2, SentIDs: []string{"e1", "e2"}, FailedIDs: []string{"e3"}}))
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Sent    int      `json:"sent"`
			SentIDs []string `json:"sent_ids"`
			Console struct {
				Sent, Failed []string
			} `json:"console"`
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if got.Sent != 2 || !slices.Equal(got.SentIDs, []string{"e1", "e2"}) ||
			!slices.Equal(got.Console.Sent, tc.sent) || !slices.Equal(got.Console.Failed, tc.failed) {
			t.Errorf("%s output %s", tc.lane, b)
		}
	}
	if b, _ := json.Marshal(shiftOutput(LaneEmail, outbox.Tally{Claims: 3})); strings.Contains(string(b), "console") {
		t.Errorf("an idle shift's output has console links: %s", b)
	}
}
