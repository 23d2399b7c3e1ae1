package httpapi

import (
	_ "embed"
	"net/http"

	"github.com/postbox/postbox/webhook"
)

// OpenAPI is the API's description (openapi.yaml), served at
// /api/v1/openapi.yaml; a test checks it against Routes.
//
//go:embed openapi.yaml
var OpenAPI []byte

// Access is who may call a route.
type Access int

const (
	// AppKey routes take an application key.
	AppKey Access = iota
	// Tenant routes are one tenant's: at Prefix+Path with a tenant token,
	// and at Prefix+"/tenants/{tenant}"+Path with an application key
	// acting as that tenant.
	Tenant
)

// Route is one operation of the API.
type Route struct {
	Method string
	Path   string // under Prefix; {id} is an endpoint's, delivery's or event's
	Access Access
	handle func(a *API, w http.ResponseWriter, r *http.Request, c *caller)
}

// Routes are every operation. The isolation test walks the Tenant ones
// with another tenant's ids; the OpenAPI test compares them with
// openapi.yaml.
var Routes = []Route{
	{http.MethodPost, "/emails", AppKey, (*API).postEmail},
	{http.MethodPost, "/events", AppKey, (*API).postEvent},
	{http.MethodGet, "/stories/{q}", AppKey, (*API).getStory},
	{http.MethodPost, "/tenants/{tenant}/portal-links", AppKey, (*API).postPortalLink},
	{http.MethodPost, "/tenants/{tenant}/tokens", AppKey, (*API).postToken},

	{http.MethodGet, "/endpoints", Tenant, (*API).listEndpoints},
	{http.MethodPost, "/endpoints", Tenant, (*API).createEndpoint},
	{http.MethodGet, "/endpoints/{id}", Tenant, (*API).getEndpoint},
	{http.MethodPatch, "/endpoints/{id}", Tenant, (*API).updateEndpoint},
	{http.MethodDelete, "/endpoints/{id}", Tenant, (*API).deleteEndpoint},
	{http.MethodPost, "/endpoints/{id}/disable", Tenant, (*API).disableEndpoint},
	{http.MethodPost, "/endpoints/{id}/enable", Tenant, (*API).enableEndpoint},
	{http.MethodGet, "/endpoints/{id}/secret", Tenant, (*API).getSecret},
	{http.MethodPost, "/endpoints/{id}/rotate-secret", Tenant, (*API).rotateSecret},
	{http.MethodGet, "/endpoints/{id}/health", Tenant, (*API).getHealth},
	{http.MethodPost, "/endpoints/{id}/recover", Tenant, (*API).recoverEndpoint},
	{http.MethodPost, "/endpoints/{id}/test", Tenant, (*API).testEndpoint},
	{http.MethodGet, "/deliveries", Tenant, (*API).listDeliveries},
	{http.MethodGet, "/deliveries/{id}", Tenant, (*API).getDelivery},
	{http.MethodPost, "/events/{id}/replay", Tenant, (*API).replayEvent},
	{http.MethodGet, "/event-types", Tenant, (*API).listEventTypes},
}

// TenantPrefix is where an application key acts as a tenant.
const TenantPrefix = "/tenants/{tenant}"

func (a *API) routes() {
	m := http.NewServeMux()
	for _, rt := range Routes {
		switch rt.Access {
		case AppKey:
			m.HandleFunc(rt.Method+" "+Prefix+rt.Path, a.serve(rt, byAppKey))
		case Tenant:
			m.HandleFunc(rt.Method+" "+Prefix+rt.Path, a.serve(rt, byTenantToken))
			m.HandleFunc(rt.Method+" "+Prefix+TenantPrefix+rt.Path, a.serve(rt, byAppKeyAsTenant))
		}
	}
	m.HandleFunc("GET "+Prefix+"/openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(OpenAPI)
	})
	m.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		fail(w, http.StatusNotFound, "no such operation: "+r.Method+" "+r.URL.Path+" (see "+Prefix+"/openapi.yaml)")
	})
	a.mux = m
}

// how a route's caller is told apart.
type how int

const (
	byAppKey how = iota
	byTenantToken
	byAppKeyAsTenant
)

// serve authenticates a request as route rt takes it, paces its caller
// and runs it.
func (a *API) serve(rt Route, h how) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c := a.authenticate(w, r)
		if c == nil {
			return
		}
		switch h {
		case byAppKey, byAppKeyAsTenant:
			if c.key == "" {
				fail(w, http.StatusForbidden, "this operation takes an application key; a tenant token reaches "+Prefix+"/endpoints, /deliveries and /events/{id}/replay")
				return
			}
		case byTenantToken:
			if c.scope == nil {
				fail(w, http.StatusForbidden, "an application key acts as a tenant under "+Prefix+TenantPrefix+rt.Path)
				return
			}
		}
		if h == byAppKeyAsTenant {
			scope, err := webhook.ForTenant(r.PathValue("tenant"))
			if err != nil {
				fail(w, http.StatusBadRequest, err.Error(), fieldError{Field: "tenant", Detail: err.Error()})
				return
			}
			c.scope = &scope
		}
		if !a.paced(w, c) {
			return
		}
		rt.handle(a, w, r, c)
	}
}
