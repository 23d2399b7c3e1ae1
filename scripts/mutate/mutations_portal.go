package main

// Mutations of the tenant portal: the tenant check of its pages, the
// link's expiry and single use, the session key after a rotation, and the
// CSRF token of its forms, each named with the test that must catch it.
func init() {
	register(
		Mutation{
			Name:    "portal: an endpoint's page reads it without the tenant check",
			File:    "internal/operator/portalsite/endpoints.go",
			Find:    "ep, err := s.scope.GetEndpoint(ctx, p.db, id)",
			Replace: "ep, err := webhook.GetEndpoint(ctx, p.db, id)",
			Pkg:     "./internal/operator/portalsite/",
			Test:    "TestIsolation_AnotherTenantsEndpointIsNoEndpoint",
		},
		Mutation{
			Name:    "portal: the edit form changes an endpoint without the tenant check",
			File:    "internal/operator/portalsite/endpoints.go",
			Find:    "_, err := s.scope.UpdateEndpoint(ctx, tx, p.settings, id,",
			Replace: "_, err := webhook.UpdateEndpoint(ctx, tx, p.settings, id,",
			Pkg:     "./internal/operator/portalsite/",
			Test:    "TestIsolation_AnotherTenantsEndpointIsNoEndpoint",
		},
		Mutation{
			Name:    "portal: an expired token still opens",
			File:    "internal/operator/portaltoken/token.go",
			Find:    "if !now.Before(c.ExpiresAt()) {",
			Replace: "if false {",
			Pkg:     "./internal/operator/portalsite/",
			Test:    "TestOpen_ALinkOpensOnceAndOnlyIfSigned|TestSession_Expires",
		},
		Mutation{
			Name:    "portal: a used link opens again",
			File:    "internal/operator/portalsite/session.go",
			Find:    "ON CONFLICT (nonce) DO NOTHING",
			Replace: "ON CONFLICT (nonce) DO UPDATE SET used_at = now()",
			Pkg:     "./internal/operator/portalsite/",
			Test:    "TestOpen_ALinkOpensOnceAndOnlyIfSigned|TestOpen_ConcurrentExchangesOfOneLinkOpenOneSession",
		},
		Mutation{
			Name:    "portal: a session of a rotated-out key still opens",
			File:    "internal/operator/portalsite/session.go",
			Find:    "portaltoken.Open(p.keys[:1], portaltoken.PurposeSession,",
			Replace: "portaltoken.Open(p.keys, portaltoken.PurposeSession,",
			Pkg:     "./internal/operator/portalsite/",
			Test:    "TestSession_RotatingTheKeyEndsSessionsButOldLinksOpen",
		},
		Mutation{
			Name:    "portal: a link passes for a session and a session for a link (no purpose in the MAC)",
			File:    "internal/operator/portaltoken/token.go",
			Find:    "\tm.Write([]byte(purpose))\n",
			Replace: "\t_ = purpose\n",
			Pkg:     "./internal/operator/portalsite/",
			Test:    "TestOpen_ALinkOpensOnceAndOnlyIfSigned",
		},
		Mutation{
			Name:    "portal csrf: forms are accepted without their token",
			File:    "internal/operator/portalsite/session.go",
			Find:    "if r.Method == http.MethodPost && !csrf.Valid(",
			Replace: "if false && !csrf.Valid(",
			Pkg:     "./internal/operator/portalsite/",
			Test:    "TestCSRF_AFormFromElsewhereIsRefused",
		},
		Mutation{
			Name:    "portal csrf: the create form carries no token",
			File:    "internal/operator/portalsite/templates/endpoints.html",
			Find:    `<input type="hidden" name="csrf" value="{{.CSRF}}">`,
			Replace: ``,
			Pkg:     "./internal/operator/portalsite/",
			Test:    "TestActions_ChangeTheTenantsOwnEndpointAndAreAudited",
		},
		Mutation{
			Name:    "portal csrf: the token is not bound to the session",
			File:    "internal/operator/portalsite/session.go",
			Find:    "func (p *Portal) csrfToken(s *session) string { return csrf.Token(p.csrfKey, s.id, s.tenant) }",
			Replace: "func (p *Portal) csrfToken(s *session) string { return csrf.Token(p.csrfKey, \"\", s.tenant) }",
			Pkg:     "./internal/operator/portalsite/",
			Test:    "TestActions_ChangeTheTenantsOwnEndpointAndAreAudited",
		},
		Mutation{
			Name:    "portal: a change is made without its audit record",
			File:    "internal/operator/portalsite/endpoints.go",
			Find:    "\t\treturn audit(ctx, tx, s, action, target)\n",
			Replace: "\t\t_ = target\n\t\treturn nil\n",
			Pkg:     "./internal/operator/portalsite/",
			Test:    "TestActions_ChangeTheTenantsOwnEndpointAndAreAudited",
		},
		Mutation{
			Name:    "portal: the session cookie is SameSite=Lax",
			File:    "internal/operator/portalsite/session.go",
			Find:    "Secure: !plainLoopback(r), SameSite: http.SameSiteStrictMode})",
			Replace: "Secure: !plainLoopback(r), SameSite: http.SameSiteLaxMode})",
			Pkg:     "./internal/operator/portalsite/",
			Test:    "TestSession_CookieAttributes",
		},
		Mutation{
			Name:    "portal: the session cookie is never Secure",
			File:    "internal/operator/portalsite/session.go",
			Find:    "Secure: !plainLoopback(r), SameSite",
			Replace: "Secure: false, SameSite",
			Pkg:     "./internal/operator/portalsite/",
			Test:    "TestSession_CookieAttributes",
		},
	)
}
