package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/postbox/postbox/portal"
)

func init() {
	registerGroup(group{
		Name:    "portal",
		Summary: "the tenant portal: mint a link that opens it for one tenant",
		Help: "The tenant portal (docs/OPERATIONS.md, \"The tenant portal\") is served by 'worker run' under " +
			"/portal/ when PORTAL_SIGNING_KEY is set: a tenant manages its own webhook endpoints there.",
	})
	register(command{
		Name:       "portal link",
		Args:       "<tenant> [--ttl 10m] [--base URL]",
		Positional: []string{"tenant"},
		Summary:    "print a one-time link that opens the portal for <tenant>",
		Help: "Mints a link signed with PORTAL_SIGNING_KEY that opens the portal for <tenant>, once, within " +
			"--ttl (the application does the same with portal.Link). The link is a credential until it is " +
			"used or expires: hand it to that tenant's browser, not to a log. --base is where browsers reach " +
			"postbox (default http://HTTP_ADDR).",
		Flags: func(fs *flag.FlagSet) runFunc {
			ttl := fs.Duration("ttl", portal.DefaultLinkTTL, fmt.Sprintf("how long the link opens the portal, up to %s", portal.MaxLinkTTL))
			base := fs.String("base", "", "postbox's address as browsers reach it, e.g. https://hooks.example.com (default http://HTTP_ADDR)")
			return func(_ context.Context, env *Env, args []string) error {
				if *ttl <= 0 || *ttl > portal.MaxLinkTTL {
					return usagef("--ttl %s: want a duration from 1s to %s", *ttl, portal.MaxLinkTTL)
				}
				keys := env.Config.Portal.Keys
				if len(keys) == 0 {
					return errors.New("PORTAL_SIGNING_KEY is not set: the portal is off, and a link needs its key")
				}
				root := *base
				if root == "" {
					root = "http://" + env.Config.HTTPAddr
				}
				u, err := url.Parse(root)
				if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" {
					return usagef("--base %q: want an http(s) address such as https://hooks.example.com", root)
				}
				link, err := portal.Link(keys[0], args[0], time.Duration(*ttl))
				if err != nil {
					return err
				}
				fmt.Fprintln(env.Stdout, strings.TrimSuffix(root, "/")+link)
				return nil
			}
		},
	})
}
