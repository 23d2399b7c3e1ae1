package portalsite

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/operator/portalaudit"
	"github.com/postbox/postbox/webhook"
)

// rotationKeep is how long a rotated-out secret keeps signing beside the
// new one: the CLI's default, a day for the receiver to switch.
const rotationKeep = 24 * time.Hour

// endpointsPage is the first page: the tenant's endpoints and a form for
// a new one.
type endpointsPage struct {
	Endpoints []webhook.Endpoint
	Catalog   []webhook.EventType
}

// endpointPage is one endpoint with its forms.
type endpointPage struct {
	Endpoint webhook.Endpoint
	Health   webhook.Health
	Catalog  []webhook.EventType
	Since    any  // sinceChoices, for the recover form
	Replays  bool // the portal can replay (it has a dispatcher)
}

// secretPage shows a signing secret, once, on request.
type secretPage struct {
	Endpoint     webhook.Endpoint
	Secret       string
	Created      bool      // the endpoint was just created
	OldExpiresAt time.Time // a rotation: when the previous secret stops signing
}

func (p *Portal) endpoints(w http.ResponseWriter, r *http.Request, s *session) {
	p.listPage(w, r, s, "")
}

func (p *Portal) listPage(w http.ResponseWriter, r *http.Request, s *session, flash string) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	eps, catalog, err := p.endpointsAndCatalog(ctx, s)
	if err != nil {
		p.fail(w, r, s, err)
		return
	}
	p.render(w, s, http.StatusOK, "endpoints", "Your webhook endpoints", flash, endpointsPage{Endpoints: eps, Catalog: catalog})
}

// endpointsAndCatalog are the tenant's endpoints and the event-type
// catalog: what the pages' forms offer to choose from.
func (p *Portal) endpointsAndCatalog(ctx context.Context, s *session) ([]webhook.Endpoint, []webhook.EventType, error) {
	eps, err := s.scope.ListEndpoints(ctx, p.db)
	if err != nil {
		return nil, nil, err
	}
	catalog, err := webhook.ListEventTypes(ctx, p.db)
	return eps, catalog, err
}

func (p *Portal) endpoint(w http.ResponseWriter, r *http.Request, s *session) {
	p.endpointPage(w, r, s, r.PathValue("id"), "")
}

func (p *Portal) endpointPage(w http.ResponseWriter, r *http.Request, s *session, id, flash string) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	ep, err := s.scope.GetEndpoint(ctx, p.db, id)
	if err != nil {
		p.fail(w, r, s, err)
		return
	}
	health, err := s.scope.EndpointHealth(ctx, p.db, id)
	if err != nil {
		p.fail(w, r, s, err)
		return
	}
	catalog, err := webhook.ListEventTypes(ctx, p.db)
	if err != nil {
		p.fail(w, r, s, err)
		return
	}
	p.render(w, s, http.StatusOK, "endpoint", "Endpoint", flash, endpointPage{Endpoint: ep, Health: health, Catalog: catalog,
		Since: sinceChoices, Replays: p.dispatcher != nil})
}

// eventTypes reads the form's subscriptions: names separated by commas,
// spaces or lines; none means every event type.
func eventTypes(r *http.Request) []string {
	return strings.FieldsFunc(r.PostFormValue("event_types"), func(c rune) bool {
		return c == ',' || c == ' ' || c == '\n' || c == '\r' || c == '\t'
	})
}

func (p *Portal) create(w http.ResponseWriter, r *http.Request, s *session) {
	params := webhook.EndpointParams{URL: strings.TrimSpace(r.PostFormValue("url")),
		Description: r.PostFormValue("description"), EventTypes: eventTypes(r)}
	var ep webhook.Endpoint
	err := p.change(r, s, "endpoint.create", func(ctx context.Context, tx pgx.Tx) (string, error) {
		var err error
		ep, err = s.scope.CreateEndpoint(ctx, tx, p.settings, params)
		return ep.ID, err
	})
	if err != nil {
		p.fail(w, r, s, err)
		return
	}
	p.render(w, s, http.StatusCreated, "secret", "Endpoint created", "", secretPage{Endpoint: ep, Secret: ep.Secret, Created: true})
}

func (p *Portal) update(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	url := strings.TrimSpace(r.PostFormValue("url"))
	description := r.PostFormValue("description")
	types := eventTypes(r)
	err := p.change(r, s, "endpoint.update", func(ctx context.Context, tx pgx.Tx) (string, error) {
		_, err := s.scope.UpdateEndpoint(ctx, tx, p.settings, id, webhook.EndpointUpdate{URL: &url, Description: &description, EventTypes: &types})
		return id, err
	})
	if err != nil {
		p.fail(w, r, s, err)
		return
	}
	p.endpointPage(w, r, s, id, "Saved.")
}

// act runs one of an endpoint's buttons.
func (p *Portal) act(w http.ResponseWriter, r *http.Request, s *session) {
	id, action := r.PathValue("id"), r.PathValue("action")
	switch action {
	case "disable", "enable":
		err := p.change(r, s, "endpoint."+action, func(ctx context.Context, tx pgx.Tx) (string, error) {
			if action == "disable" {
				return id, s.scope.DisableEndpoint(ctx, tx, id, "disabled in the portal")
			}
			return id, s.scope.EnableEndpoint(ctx, tx, id)
		})
		if err != nil {
			p.fail(w, r, s, err)
			return
		}
		p.endpointPage(w, r, s, id, "Endpoint "+action+"d.")
	case "delete":
		if r.PostFormValue("confirm") != "yes" {
			p.problem(w, r, s, http.StatusBadRequest, "Not deleted: tick the box that confirms the endpoint and what it was sent are to be removed.")
			return
		}
		err := p.change(r, s, "endpoint.delete", func(ctx context.Context, tx pgx.Tx) (string, error) {
			return id, s.scope.DeleteEndpoint(ctx, tx, id)
		})
		if err != nil {
			p.fail(w, r, s, err)
			return
		}
		p.listPage(w, r, s, "Endpoint deleted.")
	case "recover":
		p.recover(w, r, s, id)
	case "send-test":
		p.sendTest(w, r, s, id)
	case "reveal-secret":
		var secret string
		err := p.change(r, s, "endpoint.secret.reveal", func(ctx context.Context, tx pgx.Tx) (string, error) {
			var err error
			secret, err = s.scope.EndpointSecret(ctx, tx, id)
			return id, err
		})
		p.secretPage(w, r, s, id, secretPage{Secret: secret}, err)
	case "rotate-secret":
		var rot webhook.Rotation
		err := p.change(r, s, "endpoint.secret.rotate", func(ctx context.Context, tx pgx.Tx) (string, error) {
			var err error
			rot, err = s.scope.RotateSecret(ctx, tx, id, "", rotationKeep)
			return id, err
		})
		p.secretPage(w, r, s, id, secretPage{Secret: rot.Secret, OldExpiresAt: rot.OldExpiresAt}, err)
	default:
		p.problem(w, r, s, http.StatusNotFound, "No such page.")
	}
}

// secretPage shows a secret read or made by err's action.
func (p *Portal) secretPage(w http.ResponseWriter, r *http.Request, s *session, id string, page secretPage, err error) {
	if err == nil {
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		defer cancel()
		page.Endpoint, err = s.scope.GetEndpoint(ctx, p.db, id)
	}
	if err != nil {
		p.fail(w, r, s, err)
		return
	}
	p.render(w, s, http.StatusOK, "secret", "Signing secret", "", page)
}

// change runs one tenant action and its audit record in one transaction:
// do returns the action's target (an endpoint id).
func (p *Portal) change(r *http.Request, s *session, action string, do func(ctx context.Context, tx pgx.Tx) (string, error)) error {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	return portalaudit.InChange(ctx, p.db, s.entry(action), p.logger, do)
}

// audited runs an action that commits on its own (a replay commits its
// rows and makes its first attempts), then writes its audit record: do
// returns what to tell the tenant.
func (p *Portal) audited(r *http.Request, s *session, action, target string, do func(ctx context.Context) (string, error)) (string, error) {
	ctx, cancel := context.WithTimeout(r.Context(), replayTimeout)
	defer cancel()
	msg, err := do(ctx)
	if err != nil {
		return "", err
	}
	e := s.entry(action)
	e.Target = target
	portalaudit.AfterDone(ctx, p.db, e, p.logger)
	return msg, nil
}

// replayTimeout bounds a replay: its statements and its first attempts,
// each under the webhook client's own deadline.
const replayTimeout = 2 * time.Minute

// fail answers an error: an endpoint that is not the tenant's — another
// tenant's, or none at all — in the same words, bad input with what was
// wrong with it, anything else as the portal's fault, logged.
func (p *Portal) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	switch {
	case errors.Is(err, webhook.ErrNotFound):
		p.problem(w, r, s, http.StatusNotFound, "Not found: nothing of yours has that id.")
	case errors.Is(err, webhook.ErrInvalidEndpoint), errors.Is(err, webhook.ErrInvalidEvent), errors.Is(err, webhook.ErrInvalidPayload),
		errors.Is(err, webhook.ErrPayloadSchema), errors.Is(err, webhook.ErrPayloadTooLarge), errors.Is(err, webhook.ErrBadSince):
		p.problem(w, r, s, http.StatusBadRequest, "Nothing was changed: "+strings.TrimPrefix(err.Error(), "webhook: "))
	default:
		p.logger.Error("portal: a request failed", "tenant", s.tenant, "path", r.URL.Path, "error", err.Error())
		p.problem(w, r, s, http.StatusInternalServerError, "Something went wrong on our side; nothing was changed. Try again in a moment.")
	}
}
