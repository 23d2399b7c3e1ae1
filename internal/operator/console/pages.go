package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/postbox/postbox/internal/operator/backlog"
	"github.com/postbox/postbox/internal/operator/portalaudit"
	"github.com/postbox/postbox/internal/operator/story"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/webhook"
)

// pageTimeout bounds every page's queries.
const pageTimeout = 10 * time.Second

func (c *Console) home(w http.ResponseWriter, r *http.Request) {
	figs := c.sample(r.Context())
	if figs == nil {
		c.problem(w, r, http.StatusServiceUnavailable, "The outbox figures could not be read; see the worker's log.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	waiting, err := outbox.ReadWaiting(ctx, c.db, waitingCustomers)
	if err != nil {
		c.logger.Error("console: reading who waits failed", "error", err.Error())
		c.problem(w, r, http.StatusServiceUnavailable, "The email waiting figures could not be read; see the worker's log.")
		return
	}
	c.render(w, r, http.StatusOK, "home", "Outboxes", homePage{Figures: figs, Waiting: waiting})
}

// waitingCustomers is how many of the customers waiting longest the home
// page names.
const waitingCustomers = 10

// homePage is what the home page shows: each outbox's figures, and who
// waits in the email outbox.
type homePage struct {
	Figures []backlog.Figures
	Waiting outbox.Waiting
}

// search resolves q (and an optional kind) and redirects to its page.
func (c *Console) search(w http.ResponseWriter, r *http.Request) {
	q := r.FormValue("q")
	kind, err := story.ParseKind(r.FormValue("kind"))
	if err != nil {
		c.problem(w, r, http.StatusBadRequest, err.Error())
		return
	}
	c.resolve(w, r, q, kind)
}

// find is /console/find/<q>: a link that names a row without its kind
// (the shift jobs' output uses it).
func (c *Console) find(w http.ResponseWriter, r *http.Request) { c.resolve(w, r, r.PathValue("q"), "") }

func (c *Console) resolve(w http.ResponseWriter, r *http.Request, q string, kind story.Kind) {
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	s, err := story.Find(ctx, c.db, q, kind)
	if err != nil {
		c.findError(w, r, err)
		return
	}
	target := s.Query
	if s.Kind == story.KindEmail && len(s.Emails) == 1 {
		target = s.Emails[0].ID
	}
	http.Redirect(w, r, c.URL(s.Kind, target), http.StatusSeeOther)
}

func (c *Console) findError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, story.ErrMalformed):
		c.problem(w, r, http.StatusBadRequest, err.Error())
	case errors.Is(err, story.ErrNotFound):
		c.problem(w, r, http.StatusNotFound, err.Error())
	default:
		c.logger.Error("console: lookup failed", "error", err.Error())
		c.problem(w, r, http.StatusInternalServerError, "The lookup failed; see the worker's log.")
	}
}

// storyView is the story page's data.
type storyView struct {
	story.Story
	Replay bool // replay actions are available
}

func (c *Console) storyPage(k story.Kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
		defer cancel()
		s, err := story.Find(ctx, c.db, r.PathValue("q"), k)
		if err != nil {
			c.findError(w, r, err)
			return
		}
		c.render(w, r, http.StatusOK, "story", title(s), storyView{Story: s, Replay: c.replayer != nil})
	}
}

func title(s story.Story) string {
	switch s.Kind {
	case story.KindEmail:
		return "Email " + s.Query
	case story.KindInvoice:
		return "Invoice " + s.Query
	case story.KindCustomer:
		return "Customer " + s.Query + ", last 30 days"
	case story.KindRecipient:
		return "Emails to " + s.Query + ", last 30 days"
	case story.KindEvent:
		return "Event " + s.Query
	case story.KindDelivery:
		return "Delivery " + s.Query
	case story.KindEndpoint:
		return "Endpoint " + s.Query
	}
	return "Webhook outbox row " + s.Query
}

// failedLimit is how many failed rows per table the failed page lists.
const failedLimit = 100

type failedView struct {
	Emails     []outbox.Record // the table shows only the row's own columns
	Deliveries []webhook.DeliveryRecord
	Outbox     []webhook.OutboxRecord
}

func (c *Console) failed(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	var v failedView
	var err error
	v.Emails, err = outbox.ListFailed(ctx, c.db, failedLimit)
	if err == nil {
		v.Deliveries, err = webhook.ListFailedDeliveries(ctx, c.db, failedLimit)
	}
	if err == nil {
		v.Outbox, err = webhook.ListFailedOutbox(ctx, c.db, failedLimit)
	}
	if err != nil {
		c.logger.Error("console: failed rows", "error", err.Error())
		c.problem(w, r, http.StatusInternalServerError, "The failed rows could not be read; see the worker's log.")
		return
	}
	c.render(w, r, http.StatusOK, "failed", "Failed rows", v)
}

// endpointsView is the endpoints page: every endpoint, or one tenant's.
type endpointsView struct {
	Tenant    string
	Endpoints []webhook.Endpoint
	// PortalActions are the tenant's newest actions in its portal.
	PortalActions []portalaudit.Entry
}

// tenantActionsShown is how many of a tenant's portal actions its
// endpoints page shows.
const tenantActionsShown = 50

func (c *Console) endpoints(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	v := endpointsView{Tenant: r.URL.Query().Get("tenant")}
	var err error
	if v.Tenant == "" {
		v.Endpoints, err = webhook.ListEndpoints(ctx, c.db)
	} else {
		scope, serr := webhook.ForTenant(v.Tenant)
		if serr != nil {
			c.problem(w, r, http.StatusBadRequest, serr.Error())
			return
		}
		v.Endpoints, err = scope.ListEndpoints(ctx, c.db)
		if err == nil {
			v.PortalActions, err = portalaudit.OfTenant(ctx, c.db, v.Tenant, tenantActionsShown)
		}
	}
	if err != nil {
		c.logger.Error("console: endpoints", "error", err.Error())
		c.problem(w, r, http.StatusInternalServerError, "The endpoints could not be read; see the worker's log.")
		return
	}
	c.render(w, r, http.StatusOK, "endpoints", "Endpoints", v)
}

// redirectDone sends the browser to target with a signed one-line result.
func (c *Console) redirectDone(w http.ResponseWriter, r *http.Request, target, msg string) {
	http.Redirect(w, r, target+"?done="+url.QueryEscape(msg)+"&sig="+c.sign(msg), http.StatusSeeOther)
}
