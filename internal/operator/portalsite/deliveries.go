package portalsite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/operator/story"
	"github.com/postbox/postbox/webhook"
)

// deliveriesPerPage is a page of the delivery list.
const deliveriesPerPage = 50

// sinceChoices are the periods the filters and the recover form offer: a
// browser without JavaScript has no good way to type a time.
var sinceChoices = []struct {
	Value, Label string
	D            time.Duration
}{
	{"1h", "the last hour", time.Hour},
	{"6h", "the last 6 hours", 6 * time.Hour},
	{"24h", "the last day", 24 * time.Hour},
	{"72h", "the last 3 days", 72 * time.Hour},
	{"168h", "the last week", 168 * time.Hour},
}

// since reads a period of sinceChoices; "" is none.
func since(now time.Time, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	for _, c := range sinceChoices {
		if c.Value == v {
			return now.Add(-c.D), nil
		}
	}
	return time.Time{}, fmt.Errorf("%w: since %q is not one of 1h, 6h, 24h, 72h, 168h", webhook.ErrInvalidEndpoint, v)
}

// deliveriesPage is the delivery list with its filters.
type deliveriesPage struct {
	Deliveries []webhook.DeliveryRecord
	Endpoints  []webhook.Endpoint // for the endpoint filter
	Catalog    []webhook.EventType
	Filter     url.Values   // as given, for the form and the next page's link
	Since      any          // sinceChoices, for the form
	Next       template.URL // the next page's address, built from url.Values; empty: this is the last
}

func (p *Portal) deliveries(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	q := r.URL.Query()
	from, err := since(p.now(), q.Get("since"))
	if err != nil {
		p.fail(w, r, s, err)
		return
	}
	ds, err := s.scope.ListDeliveries(ctx, p.db, webhook.DeliveryQuery{EndpointID: q.Get("endpoint"), Status: webhook.DeliveryStatus(q.Get("status")),
		EventType: q.Get("type"), Since: from, Before: q.Get("before"), Limit: deliveriesPerPage})
	if err != nil {
		p.fail(w, r, s, err)
		return
	}
	eps, catalog, err := p.endpointsAndCatalog(ctx, s)
	if err != nil {
		p.fail(w, r, s, err)
		return
	}
	page := deliveriesPage{Deliveries: ds, Endpoints: eps, Catalog: catalog, Filter: q, Since: sinceChoices}
	if len(ds) == deliveriesPerPage {
		next := url.Values{}
		for k, v := range q {
			next[k] = v
		}
		next.Set("before", ds[len(ds)-1].ID)
		page.Next = template.URL(Prefix + "/deliveries?" + next.Encode())
	}
	p.render(w, s, http.StatusOK, "deliveries", "Deliveries", "", page)
}

func (p *Portal) delivery(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	d, err := s.scope.GetDelivery(ctx, p.db, r.PathValue("id"))
	if err != nil {
		p.fail(w, r, s, err)
		return
	}
	p.render(w, s, http.StatusOK, "delivery", "Delivery", "", d)
}

// replayEvent sends one of the tenant's events again where it went, as a
// new event (a replay) with the same payload.
func (p *Portal) replayEvent(w http.ResponseWriter, r *http.Request, s *session) {
	if p.dispatcher == nil {
		p.problem(w, r, s, http.StatusNotFound, "Replays are not available here.")
		return
	}
	id := r.PathValue("id")
	rep, err := p.audited(r, s, "event.replay", id, func(ctx context.Context) (string, error) {
		rep, err := s.scope.ReplayEvent(ctx, p.dispatcher, id)
		return fmt.Sprintf("Replayed as event %s: %s, %d delivered at the first attempt.", rep.EventID, nDeliveries(rep.Deliveries), rep.Attempts.Sent), err
	})
	if err != nil {
		p.fail(w, r, s, err)
		return
	}
	p.listPage(w, r, s, rep)
}

// recover replays to one of the tenant's endpoints every event whose
// delivery to it failed in the period chosen.
func (p *Portal) recover(w http.ResponseWriter, r *http.Request, s *session, id string) {
	if p.dispatcher == nil {
		p.problem(w, r, s, http.StatusNotFound, "Replays are not available here.")
		return
	}
	from, err := since(p.now(), r.PostFormValue("since"))
	if err == nil && from.IsZero() {
		err = fmt.Errorf("%w: since is required", webhook.ErrInvalidEndpoint)
	}
	if err != nil {
		p.fail(w, r, s, err)
		return
	}
	msg, err := p.audited(r, s, "endpoint.recover", id, func(ctx context.Context) (string, error) {
		b, err := s.scope.ReplayFailedSince(ctx, p.dispatcher, id, from)
		return fmt.Sprintf("Recovered %s since %s: %s, %d delivered at the first attempt.",
			story.Plural(b.Events, "failed event"), from.UTC().Format("2006-01-02 15:04Z"), nDeliveries(b.Deliveries), b.Attempts.Sent), err
	})
	if err != nil {
		p.fail(w, r, s, err)
		return
	}
	p.endpointPage(w, r, s, id, msg)
}

// sendTest enqueues a test event addressed to one of the tenant's
// endpoints (webhook.TenantScope.SendTestEvent). It goes out as any event
// does.
func (p *Portal) sendTest(w http.ResponseWriter, r *http.Request, s *session, id string) {
	typ := r.PostFormValue("type")
	var eventID string
	err := p.change(r, s, "endpoint.test", func(ctx context.Context, tx pgx.Tx) (string, error) {
		var err error
		eventID, err = s.scope.SendTestEvent(ctx, tx, p.settings, id, typ)
		return id, err
	})
	if err != nil {
		p.fail(w, r, s, err)
		return
	}
	p.endpointPage(w, r, s, id, "A test "+typ+" event is on its way (outbox row "+eventID+"); it shows in Deliveries once sent.")
}

func (p *Portal) eventTypes(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	catalog, err := webhook.ListEventTypes(ctx, p.db)
	if err != nil {
		p.fail(w, r, s, err)
		return
	}
	p.render(w, s, http.StatusOK, "eventtypes", "Event types", "", catalog)
}

// indent shows a JSON document (a schema, an example) indented.
func indent(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// nDeliveries counts deliveries in words.
func nDeliveries(n int) string {
	if n == 1 {
		return "1 delivery"
	}
	return fmt.Sprintf("%d deliveries", n)
}
