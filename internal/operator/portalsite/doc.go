// Package portalsite is the tenant portal: the pages under /portal/ where
// one of the application's customers manages its own webhook endpoints —
// list, create, edit, disable, enable, delete, reveal and rotate the
// signing secret — and nothing of any other tenant's.
//
// A browser gets in with a link the application minted (package portal):
// Open checks its signature and expiry, spends it (portal_link_uses: a
// link opens once), and sets a session cookie signed with the same key and
// bound to the link's tenant. Every page reads the tenant from that cookie
// alone, and every read and change goes through webhook.TenantScope, so an
// id of another tenant's endpoint answers exactly as one that does not
// exist. Every change is a POST carrying a CSRF token bound to the session
// (package csrf), and is written to portal_audit in the transaction that
// makes it.
//
// Pages are server-rendered (html/template, embedded), work without
// JavaScript and may be framed only by the origins configured
// (Config.FrameAncestors).
package portalsite
