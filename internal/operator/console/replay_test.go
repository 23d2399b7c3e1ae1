package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// "Replay this event" goes where the event went, and its confirmation
// page lists the endpoints it will reach: an event addressed to one
// endpoint is replayed to that one only; an event fanned out to every
// endpoint lists every enabled one subscribed, not the disabled one.
func TestReplayEvent_ConfirmListsWhereItGoes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	b := f.browser(t, "alice")
	var addressed string
	if err := f.pool.QueryRow(ctx, `INSERT INTO webhook_events (event_type, payload, endpoint_id)
		VALUES ('invoice.paid', '{"invoice":"INV-7"}', $1) RETURNING id`, f.goodEP.ID).Scan(&addressed); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		event     string
		want, not []string
	}{
		{addressed, []string{f.goodEP.ID}, []string{f.badEP.ID, f.offEP.ID}},
		{f.eventID, []string{f.goodEP.ID, f.badEP.ID}, []string{f.offEP.ID}},
	} {
		code, body := b.get("/console/confirm/replay-event?id=" + tc.event)
		if code != http.StatusOK {
			t.Fatalf("confirm replay of %s: %d\n%s", tc.event, code, body)
		}
		_, list, _ := strings.Cut(body, `id="reach"`)
		list, _, _ = strings.Cut(list, "</ul>")
		for _, id := range tc.want {
			if !strings.Contains(list, id) {
				t.Errorf("confirm replay of %s does not list endpoint %s:\n%s", tc.event, id, body)
			}
		}
		for _, id := range tc.not {
			if strings.Contains(list, id) {
				t.Errorf("confirm replay of %s lists endpoint %s, which the replay does not reach:\n%s", tc.event, id, body)
			}
		}
	}

	form := url.Values{"id": {addressed}, "confirm": {"yes"}, "csrf": {b.token("replay-event", addressed)}}
	if code, body, _ := b.do(http.MethodPost, "/console/do/replay-event", form); code != http.StatusOK || !strings.Contains(body, "1 deliveries") {
		t.Fatalf("replay of the addressed event: %d\n%s", code, body)
	}
	if n := f.count(t, `SELECT count(*) FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
		WHERE e.replay_of = $1 AND d.endpoint_id <> $2`, addressed, f.goodEP.ID); n != 0 {
		t.Fatalf("the replay of an event addressed to one endpoint made %d deliveries to others", n)
	}
}
