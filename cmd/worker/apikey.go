package main

import (
	"context"
	"fmt"

	"github.com/postbox/postbox/internal/operator/httpapi"
)

func init() {
	registerGroup(group{
		Name:    "api-key",
		Summary: "the HTTP API's application keys: make one",
		Help: "The HTTP API (docs/OPERATIONS.md, \"The HTTP API\") is served by 'worker run' under /api/v1/ when " +
			"API_KEYS is set. API_KEYS holds each key's name and SHA-256, never the key.",
	})
	register(command{
		Name:       "api-key new",
		Args:       "<name>",
		Positional: []string{"name"},
		Summary:    "make an application key for the HTTP API, and its API_KEYS entry",
		Help: "Prints a fresh application key, once, for the service that will call the API, and the entry to add " +
			"to API_KEYS (comma-separated, several at once for a rotation). The key is not stored anywhere: " +
			"API_KEYS holds its SHA-256, so a leaked configuration lets no one in. Needs no database.",
		NoEnv: true,
		Run: func(_ context.Context, env *Env, args []string) error {
			key, entry, err := httpapi.NewKey(args[0])
			if err != nil {
				return usagef("%v", err)
			}
			fmt.Fprintf(env.Stdout, "key        %s\nAPI_KEYS   %s\n\n"+
				"Give the key to the calling service (Authorization: Bearer <key>); it is shown once.\n"+
				"Add the entry to API_KEYS (comma-separated beside the others) and restart the replicas.\n", key, entry)
			return nil
		},
	})
}
