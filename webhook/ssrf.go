package webhook

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"
)

// AddressError is the SSRF guard's refusal: the delivery client would have
// connected to Addr, which is in a range no webhook should reach unless
// WEBHOOK_ALLOWED_CIDRS admits it. It wraps ErrForbiddenAddress.
type AddressError struct {
	Addr  netip.Addr
	Range string // why, e.g. "link-local"
}

func (e *AddressError) Error() string {
	return fmt.Sprintf("%s %s (%s address; admit it with %s=%s)", addressRefusal, e.Addr, e.Range, EnvAllowedCIDRs, e.admittedBy())
}

// admittedBy is the narrowest CIDR that admits the address: the address
// alone, an IPv4-mapped one in its IPv4 form (which check matches).
func (e *AddressError) admittedBy() netip.Prefix {
	a := e.Addr.Unmap()
	return netip.PrefixFrom(a, a.BitLen())
}

// addressRefusal starts every AddressError's text, as last_error keeps it.
const addressRefusal = "webhook: refusing to connect to"

// RefusedByAddressGuard reports whether a delivery's stored last_error is
// the SSRF guard's refusal: retrying the same URL cannot succeed until the
// endpoint or WEBHOOK_ALLOWED_CIDRS changes.
func RefusedByAddressGuard(lastError string) bool { return strings.Contains(lastError, addressRefusal) }

// Unwrap makes errors.Is(err, ErrForbiddenAddress) hold.
func (e *AddressError) Unwrap() error { return ErrForbiddenAddress }

// deniedRanges are refused unless allowlisted, in the order they are
// reported. The stdlib predicates (IsLoopback, IsPrivate…) cover the
// common ranges; these are the ones they miss.
var deniedRanges = []struct {
	prefix netip.Prefix
	name   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignment"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"}, // includes 255.255.255.255
	{netip.MustParsePrefix("::ffff:0:0/96"), "IPv4-mapped IPv6"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible IPv6"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64"}, // embeds an IPv4 address a gateway would reach
	{netip.MustParsePrefix("64:ff9b:1::/48"), "NAT64"},
	{netip.MustParsePrefix("2002::/16"), "6to4"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
}

// addressPolicy decides, per resolved address, whether the delivery client
// may connect.
type addressPolicy struct {
	allowed []netip.Prefix
}

// check returns an *AddressError for a denied address that no allowed
// prefix admits. An IPv4-mapped IPv6 address is the IPv4 address it maps
// to: an IPv4 CIDR admits it (a resolver can answer ::ffff:127.0.0.1 for
// localhost), as does a CIDR of its mapped form, and it is denied for the
// ranges of both forms, so ::ffff:10.0.0.1 is not a way around the 10/8
// rule.
func (p addressPolicy) check(addr netip.Addr) error {
	addr = addr.WithZone("")
	if p.admits(addr) || addr.Is4In6() && p.admits(addr.Unmap()) {
		return nil
	}
	if r := deniedRange(addr); r != "" {
		return &AddressError{Addr: addr, Range: r}
	}
	if addr.Is4In6() {
		if r := deniedRange(addr.Unmap()); r != "" {
			return &AddressError{Addr: addr, Range: r}
		}
	}
	return nil
}

func (p addressPolicy) admits(addr netip.Addr) bool {
	return slices.ContainsFunc(p.allowed, func(pf netip.Prefix) bool { return pf.Contains(addr) })
}

func deniedRange(a netip.Addr) string {
	switch {
	case !a.IsValid():
		return "invalid"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	case a.IsPrivate():
		return "private" // 10/8, 172.16/12, 192.168/16, fc00::/7 (unique local)
	case a.IsLinkLocalUnicast():
		return "link-local" // 169.254/16 (cloud metadata at 169.254.169.254), fe80::/10
	case a.IsMulticast(), a.IsLinkLocalMulticast(), a.IsInterfaceLocalMulticast():
		return "multicast"
	}
	for _, r := range deniedRanges {
		if r.prefix.Contains(a) {
			return r.name
		}
	}
	return ""
}

// control is the delivery dialer's net.Dialer.Control. It runs for every
// socket the dialer opens, after DNS resolution and before connect(2), with
// the exact address about to be dialled. Checking here — not the URL's host,
// not a separate lookup — is what makes the guard safe against DNS
// rebinding: there is no second resolution between the check and the
// connection. A refusal means no packet leaves.
func (p addressPolicy) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		// Fail closed: an address this code cannot read is not one it vetted.
		return fmt.Errorf("%w: cannot parse dial address %q (%s)", ErrForbiddenAddress, address, network)
	}
	return p.check(ap.Addr())
}

// resolveTimeout bounds CheckAddress's DNS lookup.
const resolveTimeout = 5 * time.Second

// CheckAddress resolves rawURL's host now and applies the SSRF guard to
// every address, as each attempt will: an *AddressError (ErrForbiddenAddress)
// for a URL that would be refused on every attempt under cfg.AllowedCIDRs.
// A host that does not resolve is a *net.DNSError: not a refusal (DNS may
// be ready before the first event), only worth a warning. Creating an
// endpoint from the CLI calls it; the attempt checks again at connect time,
// where DNS rebinding cannot slip past.
func CheckAddress(ctx context.Context, cfg Settings, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("%w: url %q does not parse", ErrInvalidEndpoint, redactURL(rawURL))
	}
	policy := addressPolicy{allowed: cfg.AllowedCIDRs}
	if addr, err := netip.ParseAddr(u.Hostname()); err == nil {
		return policy.check(addr)
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", u.Hostname())
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if err := policy.check(a); err != nil {
			return err
		}
	}
	return nil
}
