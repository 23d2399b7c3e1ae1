package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/operator/portaltoken"
	"github.com/postbox/postbox/internal/operator/story"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/portal"
	"github.com/postbox/postbox/webhook"
)

// IdempotencyHeader makes an enqueue idempotent: a request retried with
// the same key (per customer for an email, per tenant for an event)
// returns the row the first one made.
const IdempotencyHeader = "Idempotency-Key"

// emailRequest is POST /emails's body: the email_outbox row's columns.
type emailRequest struct {
	Kind       string          `json:"kind"`
	CustomerID string          `json:"customer_id"`
	InvoiceID  string          `json:"invoice_id"`
	Payload    json.RawMessage `json:"payload"`
	SendAt     *time.Time      `json:"send_at"`
	Priority   outbox.Priority `json:"priority"`
}

// enqueued is an enqueue's answer.
type enqueued struct {
	ID string `json:"id"`
}

// postEmail enqueues an email, committed before the answer.
func (a *API) postEmail(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req emailRequest
	if a.decode(w, r, &req) != nil {
		return
	}
	if len(req.Payload) == 0 {
		fail(w, http.StatusBadRequest, "payload is required", fieldError{Field: "payload", Detail: "is required"})
		return
	}
	payload, err := outbox.PayloadFromJSON(req.Payload)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	email := outbox.Email{Kind: outbox.Kind(req.Kind), CustomerID: req.CustomerID, InvoiceID: req.InvoiceID, Payload: payload,
		IdempotencyKey: r.Header.Get(IdempotencyHeader), Priority: req.Priority}
	if req.SendAt != nil {
		email.SendAt = *req.SendAt
	}
	ctx, cancel := bounded(r, requestTimeout)
	defer cancel()
	id, err := a.groups.enqueue(ctx, func(ctx context.Context, tx pgx.Tx) (string, error) {
		return a.emails.Enqueue(ctx, tx, email)
	})
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	reply(w, http.StatusAccepted, enqueued{ID: id})
}

// eventRequest is POST /events's body.
type eventRequest struct {
	Tenant      string          `json:"tenant"`
	Type        string          `json:"type"`
	Payload     json.RawMessage `json:"payload"`
	EndpointID  string          `json:"endpoint_id"`
	OrderingKey string          `json:"ordering_key"`
	SendAt      *time.Time      `json:"send_at"`
}

// postEvent enqueues a webhook event, committed before the answer.
func (a *API) postEvent(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req eventRequest
	if a.decode(w, r, &req) != nil {
		return
	}
	switch {
	case req.Type == "":
		fail(w, http.StatusBadRequest, "type is required", fieldError{Field: "type", Detail: "is required"})
		return
	case len(req.Payload) == 0:
		fail(w, http.StatusBadRequest, "payload is required", fieldError{Field: "payload", Detail: "is required"})
		return
	}
	ev := webhook.Event{Tenant: req.Tenant, Type: req.Type, Payload: req.Payload, EndpointID: req.EndpointID,
		OrderingKey: req.OrderingKey, IdempotencyKey: r.Header.Get(IdempotencyHeader)}
	if req.SendAt != nil {
		ev.SendAt = *req.SendAt
	}
	ctx, cancel := bounded(r, requestTimeout)
	defer cancel()
	id, err := a.groups.enqueue(ctx, func(ctx context.Context, tx pgx.Tx) (string, error) {
		return webhook.Enqueuer{MaxPayloadBytes: a.webhook.MaxPayloadBytes}.EnqueueEvent(ctx, tx, ev)
	})
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	reply(w, http.StatusAccepted, enqueued{ID: id})
}

// getStory is `worker show --json` of q: an email, invoice, customer,
// recipient, event, delivery, endpoint or webhook_outbox row.
func (a *API) getStory(w http.ResponseWriter, r *http.Request, _ *caller) {
	var kind story.Kind
	if k := r.URL.Query().Get("kind"); k != "" {
		var err error
		if kind, err = story.ParseKind(k); err != nil {
			fail(w, http.StatusBadRequest, err.Error(), fieldError{Field: "kind", Detail: err.Error()})
			return
		}
	}
	ctx, cancel := bounded(r, requestTimeout)
	defer cancel()
	s, err := story.Find(ctx, a.db, r.PathValue("q"), kind)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	reply(w, http.StatusOK, s)
}

// ttlRequest is the body of the routes that mint something for a tenant.
type ttlRequest struct {
	TTLSeconds int `json:"ttl_seconds"` // 0: the default
}

// minted is a link or token, with when it stops working.
type minted struct {
	Path      string    `json:"path,omitempty"`  // a portal link: put postbox's address in front
	Token     string    `json:"token,omitempty"` // a tenant token: send as Authorization: Bearer
	ExpiresAt time.Time `json:"expires_at"`
}

// readTTL reads an optional ttlRequest, in (0, maxTTL].
func (a *API) readTTL(w http.ResponseWriter, r *http.Request, def, maxTTL time.Duration) (time.Duration, bool) {
	var req ttlRequest
	if r.ContentLength != 0 {
		if a.decode(w, r, &req) != nil {
			return 0, false
		}
	}
	ttl := time.Duration(req.TTLSeconds) * time.Second
	switch {
	case req.TTLSeconds == 0:
		return def, true
	case ttl < 0 || ttl > maxTTL:
		fail(w, http.StatusBadRequest, "ttl_seconds must be from 1 to "+maxTTL.String(), fieldError{Field: "ttl_seconds", Detail: "out of range"})
		return 0, false
	}
	return ttl, true
}

// postPortalLink mints a one-time portal link for a tenant (portal.Link).
func (a *API) postPortalLink(w http.ResponseWriter, r *http.Request, _ *caller) {
	if len(a.portalKeys) == 0 {
		fail(w, http.StatusNotFound, "the tenant portal is off: set PORTAL_SIGNING_KEY")
		return
	}
	ttl, ok := a.readTTL(w, r, portal.DefaultLinkTTL, portal.MaxLinkTTL)
	if !ok {
		return
	}
	link, err := portal.Link(a.portalKeys[0], r.PathValue("tenant"), ttl)
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error(), fieldError{Field: "tenant", Detail: err.Error()})
		return
	}
	reply(w, http.StatusCreated, minted{Path: link, ExpiresAt: a.now().Add(ttl).UTC().Truncate(time.Second)})
}

// Tenant tokens last an hour unless asked otherwise, a day at most.
const (
	DefaultTokenTTL = time.Hour
	MaxTokenTTL     = 24 * time.Hour
)

// postToken mints a tenant token: a portal session's claims, for a
// service acting for one tenant.
func (a *API) postToken(w http.ResponseWriter, r *http.Request, c *caller) {
	if len(a.portalKeys) == 0 {
		fail(w, http.StatusNotFound, "tenant tokens are signed with PORTAL_SIGNING_KEY, which is not set")
		return
	}
	ttl, ok := a.readTTL(w, r, DefaultTokenTTL, MaxTokenTTL)
	if !ok {
		return
	}
	tenant := r.PathValue("tenant")
	if _, err := webhook.ForTenant(tenant); err != nil {
		fail(w, http.StatusBadRequest, err.Error(), fieldError{Field: "tenant", Detail: err.Error()})
		return
	}
	expires := a.now().Add(ttl)
	token, err := portaltoken.Sign(a.portalKeys[0], portaltoken.PurposeSession, portaltoken.Claims{Tenant: tenant, Nonce: portaltoken.NewNonce(), Expires: expires.Unix()})
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	a.logger.Info("api: tenant token minted", "key", c.key, "tenant", tenant, "expires_at", expires.UTC().Format(time.RFC3339))
	reply(w, http.StatusCreated, minted{Token: token, ExpiresAt: time.Unix(expires.Unix(), 0).UTC()})
}

// failErr answers an error of the layers below: bad input naming its
// field, something that is not the caller's (or not there) as not found,
// anything else as ours, logged.
func (a *API) failErr(w http.ResponseWriter, r *http.Request, err error) {
	var invalid *outbox.ValidationError
	var notFound *story.NotFoundError
	switch {
	case errors.Is(err, errBody):
	case errors.As(err, &invalid):
		fail(w, http.StatusBadRequest, invalid.Field+" "+invalid.Problem, fieldError{Field: invalid.Field, Detail: invalid.Problem})
	case errors.Is(err, webhook.ErrNotFound), errors.As(err, &notFound):
		fail(w, http.StatusNotFound, "not found")
	case errors.Is(err, story.ErrMalformed):
		fail(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, webhook.ErrInvalidEndpoint), errors.Is(err, webhook.ErrInvalidEvent), errors.Is(err, webhook.ErrInvalidPayload),
		errors.Is(err, webhook.ErrPayloadSchema), errors.Is(err, webhook.ErrPayloadTooLarge), errors.Is(err, webhook.ErrBadSince),
		errors.Is(err, outbox.ErrInvalid):
		field := fieldOf(err)
		fail(w, http.StatusBadRequest, err.Error(), fieldError{Field: field, Detail: err.Error()})
	default:
		a.logger.Error("api: a request failed", "path", r.URL.Path, "error", err.Error())
		fail(w, http.StatusInternalServerError, "the request failed on our side (see the worker's log); an enqueue retried with its Idempotency-Key makes no second row")
	}
}
