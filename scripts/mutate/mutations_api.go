package main

// Mutations of the HTTP API: the application keys' hashes, the tenant
// check of its operations, the tenant token's key, the idempotency key of
// an enqueue and the pace of failing addresses, each named with the test
// that must catch it.
func init() {
	register(
		Mutation{
			Name:    "api: a presented key is compared with the stored hash itself (an unhashed key)",
			File:    "internal/operator/httpapi/keys.go",
			Find:    "\tsum := sha256.Sum256([]byte(presented))\n",
			Replace: "\tvar sum [32]byte\n\tif b, err := hex.DecodeString(presented); err == nil {\n\t\tcopy(sum[:], b)\n\t}\n",
			Pkg:     "./internal/operator/httpapi/",
			Test:    "TestAuth",
		},
		Mutation{
			Name:    "api: API_KEYS takes a key where its hash belongs",
			File:    "internal/operator/httpapi/keys.go",
			Find:    `if algo != "sha256" || err != nil || len(b) != sha256.Size {`,
			Replace: `if algo != "sha256" && err != nil && false {`,
			Pkg:     "./internal/operator/httpapi/",
			Test:    "TestParseKeys",
		},
		Mutation{
			Name:    "api: an endpoint is read without the tenant check",
			File:    "internal/operator/httpapi/tenant.go",
			Find:    `ep, err := c.scope.GetEndpoint(ctx, a.db, r.PathValue("id"))`,
			Replace: `ep, err := webhook.GetEndpoint(ctx, a.db, r.PathValue("id"))`,
			Pkg:     "./internal/operator/httpapi/",
			Test:    "TestIsolation_AnotherTenantsIDsAreNoIDs",
		},
		Mutation{
			Name:    "api: a delivery is read without the tenant check",
			File:    "internal/operator/httpapi/tenant.go",
			Find:    `d, err := c.scope.GetDelivery(ctx, a.db, r.PathValue("id"))`,
			Replace: `d, err := webhook.GetDelivery(ctx, a.db, r.PathValue("id"))`,
			Pkg:     "./internal/operator/httpapi/",
			Test:    "TestIsolation_AnotherTenantsIDsAreNoIDs",
		},
		Mutation{
			Name:    "api: a tenant token is accepted at an application key's routes",
			File:    "internal/operator/httpapi/routes.go",
			Find:    "\t\t\tif c.key == \"\" {\n",
			Replace: "\t\t\tif c.key == \"\" && c.scope == nil {\n",
			Pkg:     "./internal/operator/httpapi/",
			Test:    "TestAuth",
		},
		Mutation{
			Name:    "api: a tenant token of a rotated-out key still opens",
			File:    "internal/operator/httpapi/api.go",
			Find:    "c, err := portaltoken.Open(a.portalKeys[:1], portaltoken.PurposeSession, token, a.now())",
			Replace: "c, err := portaltoken.Open(a.portalKeys, portaltoken.PurposeSession, token, a.now())",
			Pkg:     "./internal/operator/httpapi/",
			Test:    "TestAuth",
		},
		Mutation{
			Name:    "api: the Idempotency-Key header is ignored",
			File:    "internal/operator/httpapi/enqueue.go",
			Find:    "\t\tIdempotencyKey: r.Header.Get(IdempotencyHeader), Priority: req.Priority}",
			Replace: "\t\tPriority: req.Priority}",
			Pkg:     "./internal/operator/httpapi/",
			Test:    "TestEnqueue_CommittedOnceWithAnIdempotencyKey",
		},
		Mutation{
			Name:    "api: addresses failing authentication are not paced",
			File:    "internal/operator/httpapi/api.go",
			Find:    "if ok, wait := a.failures.Allow(pace.Address(r), a.now()); !ok {",
			Replace: "if ok, wait := a.failures.Allow(pace.Address(r), a.now()); false && !ok {",
			Pkg:     "./internal/operator/httpapi/",
			Test:    "TestAuth",
		},
		Mutation{
			Name:    "api: a key's requests are not paced",
			File:    "internal/operator/httpapi/api.go",
			Find:    "\tif ok, wait := a.perCaller.Allow(key, a.now()); !ok {\n",
			Replace: "\tif ok, wait := a.perCaller.Allow(key, a.now()); false && !ok {\n",
			Pkg:     "./internal/operator/httpapi/",
			Test:    "TestRateLimitPerKey",
		},
		Mutation{
			Name:    "api: a group with a failed enqueue answers every enqueue in it with the failure",
			File:    "internal/operator/httpapi/groupcommit.go",
			Find:    "\tif len(group) == 1 {\n",
			Replace: "\tif len(group) >= 1 {\n\t\tfor _, j := range group[1:] {\n\t\t\tj.done <- groupResult{err: err}\n\t\t}\n",
			Pkg:     "./internal/operator/httpapi/",
			Test:    "TestGroupCommit_AFailureCostsItsNeighboursOnlyARetry",
		},
		Mutation{
			Name:    "api: enqueues waiting together are committed one by one (no groups)",
			File:    "internal/operator/httpapi/groupcommit.go",
			Find:    "\t\tfor len(group) < maxGroup {\n",
			Replace: "\t\tfor len(group) < 1 {\n",
			Pkg:     "./internal/operator/httpapi/",
			Test:    "TestGroupCommit_WaitingEnqueuesShareACommit",
		},
		Mutation{
			Name:    "api: the body cap is lifted",
			File:    "internal/operator/httpapi/api.go",
			Find:    "dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, a.bodyLimit))",
			Replace: "dec := json.NewDecoder(r.Body)",
			Pkg:     "./internal/operator/httpapi/",
			Test:    "TestEnqueue_BadInputNamesTheField",
		},
	)
}
