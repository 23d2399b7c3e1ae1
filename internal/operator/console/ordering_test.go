package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A failed delivery that holds its ordering key back says so on its page
// and offers to let the key go on; the waiting delivery's page names what
// it waits for; the action skips the head and the key's next delivery no
// longer waits.
func TestOrdering_DeliveryPagesAndSkip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	b := f.browser(t, "alice")
	var head, next string
	for i, dst := range []*string{&head, &next} {
		status := "failed"
		if i == 1 {
			status = "pending"
		}
		if err := f.pool.QueryRow(ctx, `WITH ev AS (
	INSERT INTO webhook_events (event_type, payload, ordering_key) VALUES ('invoice.paid', '{}', 'in_7') RETURNING id, ordering_seq)
INSERT INTO webhook_deliveries (event_id, endpoint_id, status, attempts, next_retry_at, ordering_key, ordering_seq)
SELECT ev.id, $1, $2, 3, now(), 'in_7', ev.ordering_seq FROM ev RETURNING id`, f.goodEP.ID, status).Scan(dst); err != nil {
			t.Fatal(err)
		}
	}
	if _, page := b.get("/console/delivery/" + next); !strings.Contains(page, "waits for the earlier delivery "+head) {
		t.Fatalf("the waiting delivery's page does not say what it waits for:\n%s", page)
	}
	_, page := b.get("/console/delivery/" + head)
	if !strings.Contains(page, "/confirm/skip-ordered-head?id="+head) || !strings.Contains(page, "1 delivery of its key waiting behind it") {
		t.Fatalf("the failed head's page offers no skip:\n%s", page)
	}
	form := url.Values{"id": {head}, "confirm": {"yes"}, "csrf": {b.token("skip-ordered-head", head)}}
	code, body, _ := b.do(http.MethodPost, "/console/do/skip-ordered-head", form)
	if code != 200 || !strings.Contains(body, "goes on without it") {
		t.Fatalf("skip: %d:\n%s", code, body)
	}
	if _, page := b.get("/console/delivery/" + next); strings.Contains(page, "waits for the earlier delivery") {
		t.Fatalf("after the skip the next delivery still waits:\n%s", page)
	}
}
