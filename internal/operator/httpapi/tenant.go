package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/operator/portalaudit"
	"github.com/postbox/postbox/webhook"
)

// The tenant's operations: what its portal does, through the same
// webhook.TenantScope, audited as the portal's are (the session is the
// tenant token's, or "api-key:<name>" for an application key acting as
// the tenant).

// endpointRequest is the body of POST and PATCH /endpoints: on PATCH an
// absent field is left as it is.
type endpointRequest struct {
	URL         *string   `json:"url"`
	Description *string   `json:"description"`
	EventTypes  *[]string `json:"event_types"`
	Secret      string    `json:"secret"` // POST only; empty: a fresh one
}

// change runs one tenant action on target and its audit record in one
// transaction.
func (a *API) change(r *http.Request, c *caller, action, target string, do func(ctx context.Context, tx pgx.Tx) error) error {
	ctx, cancel := bounded(r, requestTimeout)
	defer cancel()
	return portalaudit.InChange(ctx, a.db, c.entry(action), a.logger, func(ctx context.Context, tx pgx.Tx) (string, error) {
		if err := do(ctx, tx); err != nil {
			return "", err
		}
		return target, nil
	})
}

// entry is the audit record of the caller's action.
func (c *caller) entry(action string) portalaudit.Entry {
	return portalaudit.Entry{Tenant: c.scope.Tenant(), Session: c.session, Action: action}
}

func (a *API) listEndpoints(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := bounded(r, requestTimeout)
	defer cancel()
	eps, err := c.scope.ListEndpoints(ctx, a.db)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	reply(w, http.StatusOK, map[string]any{"endpoints": eps})
}

func (a *API) createEndpoint(w http.ResponseWriter, r *http.Request, c *caller) {
	var req endpointRequest
	if a.decode(w, r, &req) != nil {
		return
	}
	if req.URL == nil {
		fail(w, http.StatusBadRequest, "url is required", fieldError{Field: "url", Detail: "is required"})
		return
	}
	p := webhook.EndpointParams{URL: *req.URL, Secret: req.Secret}
	if req.Description != nil {
		p.Description = *req.Description
	}
	if req.EventTypes != nil {
		p.EventTypes = *req.EventTypes
	}
	var ep webhook.Endpoint
	err := a.change(r, c, "endpoint.create", "", func(ctx context.Context, tx pgx.Tx) error {
		var err error
		ep, err = c.scope.CreateEndpoint(ctx, tx, a.webhook, p)
		return err
	})
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	reply(w, http.StatusCreated, ep) // with its secret, this once
}

func (a *API) getEndpoint(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := bounded(r, requestTimeout)
	defer cancel()
	ep, err := c.scope.GetEndpoint(ctx, a.db, r.PathValue("id"))
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	reply(w, http.StatusOK, ep)
}

func (a *API) updateEndpoint(w http.ResponseWriter, r *http.Request, c *caller) {
	var req endpointRequest
	if a.decode(w, r, &req) != nil {
		return
	}
	if req.Secret != "" {
		fail(w, http.StatusBadRequest, "secret cannot be set; POST .../rotate-secret makes a new one", fieldError{Field: "secret", Detail: "is not changed by PATCH"})
		return
	}
	id := r.PathValue("id")
	var ep webhook.Endpoint
	err := a.change(r, c, "endpoint.update", id, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		ep, err = c.scope.UpdateEndpoint(ctx, tx, a.webhook, id, webhook.EndpointUpdate{URL: req.URL, Description: req.Description, EventTypes: req.EventTypes})
		return err
	})
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	reply(w, http.StatusOK, ep)
}

func (a *API) deleteEndpoint(w http.ResponseWriter, r *http.Request, c *caller) {
	id := r.PathValue("id")
	err := a.change(r, c, "endpoint.delete", id, func(ctx context.Context, tx pgx.Tx) error {
		return c.scope.DeleteEndpoint(ctx, tx, id)
	})
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// disableRequest is POST .../disable's optional body.
type disableRequest struct {
	Reason string `json:"reason"`
}

func (a *API) disableEndpoint(w http.ResponseWriter, r *http.Request, c *caller) {
	var req disableRequest
	if r.ContentLength != 0 && a.decode(w, r, &req) != nil {
		return
	}
	if req.Reason == "" {
		req.Reason = "disabled through the API"
	}
	a.setEnabled(w, r, c, "endpoint.disable", func(ctx context.Context, tx pgx.Tx, id string) error {
		return c.scope.DisableEndpoint(ctx, tx, id, req.Reason)
	})
}

func (a *API) enableEndpoint(w http.ResponseWriter, r *http.Request, c *caller) {
	a.setEnabled(w, r, c, "endpoint.enable", func(ctx context.Context, tx pgx.Tx, id string) error {
		return c.scope.EnableEndpoint(ctx, tx, id)
	})
}

// setEnabled runs a disable or enable and answers the endpoint as it is.
func (a *API) setEnabled(w http.ResponseWriter, r *http.Request, c *caller, action string, do func(ctx context.Context, tx pgx.Tx, id string) error) {
	id := r.PathValue("id")
	var ep webhook.Endpoint
	err := a.change(r, c, action, id, func(ctx context.Context, tx pgx.Tx) error {
		if err := do(ctx, tx, id); err != nil {
			return err
		}
		var err error
		ep, err = c.scope.GetEndpoint(ctx, tx, id)
		return err
	})
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	reply(w, http.StatusOK, ep)
}

func (a *API) getSecret(w http.ResponseWriter, r *http.Request, c *caller) {
	id := r.PathValue("id")
	var secret string
	err := a.change(r, c, "endpoint.secret.reveal", id, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		secret, err = c.scope.EndpointSecret(ctx, tx, id)
		return err
	})
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	reply(w, http.StatusOK, map[string]string{"id": id, "secret": secret})
}

// rotateRequest is POST .../rotate-secret's optional body.
type rotateRequest struct {
	KeepSeconds *int `json:"keep_seconds"` // how long the old secret still signs; default a day
}

func (a *API) rotateSecret(w http.ResponseWriter, r *http.Request, c *caller) {
	var req rotateRequest
	if r.ContentLength != 0 && a.decode(w, r, &req) != nil {
		return
	}
	keep := 24 * time.Hour
	if req.KeepSeconds != nil {
		keep = time.Duration(*req.KeepSeconds) * time.Second
	}
	id := r.PathValue("id")
	var rot webhook.Rotation
	err := a.change(r, c, "endpoint.secret.rotate", id, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		rot, err = c.scope.RotateSecret(ctx, tx, id, "", keep)
		return err
	})
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	reply(w, http.StatusOK, rot)
}

func (a *API) getHealth(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := bounded(r, requestTimeout)
	defer cancel()
	h, err := c.scope.EndpointHealth(ctx, a.db, r.PathValue("id"))
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	reply(w, http.StatusOK, h)
}

// recoverRequest is POST .../recover's body.
type recoverRequest struct {
	Since time.Time `json:"since"`
}

func (a *API) recoverEndpoint(w http.ResponseWriter, r *http.Request, c *caller) {
	if a.dispatcher == nil {
		fail(w, http.StatusNotFound, "replays are not available on this server")
		return
	}
	var req recoverRequest
	if a.decode(w, r, &req) != nil {
		return
	}
	if req.Since.IsZero() {
		fail(w, http.StatusBadRequest, "since is required (RFC 3339)", fieldError{Field: "since", Detail: "is required"})
		return
	}
	id := r.PathValue("id")
	ctx, cancel := bounded(r, replayTimeout)
	defer cancel()
	b, err := c.scope.ReplayFailedSince(ctx, a.dispatcher, id, req.Since)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	a.audited(r, c, "endpoint.recover", id)
	reply(w, http.StatusOK, b)
}

// testRequest is POST .../test's body.
type testRequest struct {
	Type string `json:"type"` // a catalog type with an example, or webhook.TestEventType
}

func (a *API) testEndpoint(w http.ResponseWriter, r *http.Request, c *caller) {
	var req testRequest
	if r.ContentLength != 0 && a.decode(w, r, &req) != nil {
		return
	}
	if req.Type == "" {
		req.Type = webhook.TestEventType
	}
	id := r.PathValue("id")
	var outboxID string
	err := a.change(r, c, "endpoint.test", id, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		outboxID, err = c.scope.SendTestEvent(ctx, tx, a.webhook, id, req.Type)
		return err
	})
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	reply(w, http.StatusAccepted, enqueued{ID: outboxID})
}

// deliveryPage is a page of GET /deliveries.
type deliveryPage struct {
	Deliveries []webhook.DeliveryRecord `json:"deliveries"`
	// NextCursor, when set, is the cursor of the next (older) page.
	NextCursor string `json:"next_cursor,omitempty"`
}

func (a *API) listDeliveries(w http.ResponseWriter, r *http.Request, c *caller) {
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			fail(w, http.StatusBadRequest, "limit must be from 1 to 1000", fieldError{Field: "limit", Detail: "out of range"})
			return
		}
		limit = n
	}
	var since time.Time
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			fail(w, http.StatusBadRequest, "since must be an RFC 3339 time", fieldError{Field: "since", Detail: "is not RFC 3339"})
			return
		}
		since = t
	}
	ctx, cancel := bounded(r, requestTimeout)
	defer cancel()
	ds, err := c.scope.ListDeliveries(ctx, a.db, webhook.DeliveryQuery{EndpointID: q.Get("endpoint"), Status: webhook.DeliveryStatus(q.Get("status")),
		EventType: q.Get("type"), Since: since, Before: q.Get("cursor"), Limit: limit})
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	page := deliveryPage{Deliveries: ds}
	if len(ds) == limit {
		page.NextCursor = ds[len(ds)-1].ID
	}
	reply(w, http.StatusOK, page)
}

func (a *API) getDelivery(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := bounded(r, requestTimeout)
	defer cancel()
	d, err := c.scope.GetDelivery(ctx, a.db, r.PathValue("id"))
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	reply(w, http.StatusOK, d)
}

func (a *API) replayEvent(w http.ResponseWriter, r *http.Request, c *caller) {
	if a.dispatcher == nil {
		fail(w, http.StatusNotFound, "replays are not available on this server")
		return
	}
	id := r.PathValue("id")
	ctx, cancel := bounded(r, replayTimeout)
	defer cancel()
	rep, err := c.scope.ReplayEvent(ctx, a.dispatcher, id)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	a.audited(r, c, "event.replay", id)
	reply(w, http.StatusOK, rep)
}

func (a *API) listEventTypes(w http.ResponseWriter, r *http.Request, _ *caller) {
	ctx, cancel := bounded(r, requestTimeout)
	defer cancel()
	types, err := webhook.ListEventTypes(ctx, a.db)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	reply(w, http.StatusOK, map[string]any{"event_types": types})
}

// audited records an action that committed on its own (a replay).
func (a *API) audited(r *http.Request, c *caller, action, target string) {
	e := c.entry(action)
	e.Target = target
	portalaudit.AfterDone(r.Context(), a.db, e, a.logger)
}

// fieldOf names the request field a webhook error is about. The webhook
// package's errors are sentences (they name the field in words for the
// CLI and the portal); the API also gives the field's JSON name.
func fieldOf(err error) string {
	msg := err.Error()
	for _, f := range []struct{ word, field string }{
		{"URL", "url"}, {"url", "url"}, {"description", "description"}, {"event type", "event_types"}, {"secret", "secret"},
		{"keep", "keep_seconds"}, {"since", "since"}, {"tenant", "tenant"}, {"idempotency key", "Idempotency-Key"},
		{"ordering key", "ordering_key"}, {"send_at", "send_at"}, {"payload", "payload"}, {"status", "status"}, {"limit", "limit"},
	} {
		if strings.Contains(msg, f.word) {
			return f.field
		}
	}
	return ""
}
