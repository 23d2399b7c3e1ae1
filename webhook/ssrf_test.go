package webhook

import (
	"context"
	"errors"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// Without WEBHOOK_ALLOWED_CIDRS the delivery client refuses loopback —
// by literal, by name and as an IPv4-mapped IPv6 literal — and the cloud
// metadata address, at dial time: the refusal is permanent, names the
// address, and the receiver sees nothing. No test traffic leaves loopback:
// 169.254.169.254 is refused before connect(2).
func TestDelivery_SSRFRefusedWithoutAllowlist(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	guarded := newDispatcher(t, pool, func(o *Config) { o.Settings.AllowedCIDRs = nil })
	rc := newReceiver(t, nil)
	u, err := url.Parse(rc.URL)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()

	targets := map[string]string{ // url → address the error must name
		"http://127.0.0.1:" + port + "/literal":         "127.0.0.1",
		"http://localhost:" + port + "/by-name":         "", // ::1 or 127.0.0.1, whichever the resolver tries first
		"http://[::ffff:127.0.0.1]:" + port + "/mapped": "127.0.0.1",
		"http://169.254.169.254/latest/meta-data/":      "169.254.169.254",
		"http://[::1]:" + port + "/v6":                  "::1",
	}
	byEndpoint := map[string]string{}
	for target, addr := range targets {
		byEndpoint[createEndpoint(t, pool, target).ID] = addr
	}
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})

	sum, err := guarded.Drain(ctx, testWindow)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Failed != len(targets) {
		t.Fatalf("ProcessBatch = %+v, want all %d deliveries failed for good", sum, len(targets))
	}
	for _, d := range deliveries(t, pool, `true`) {
		msg := str(d.LastError)
		if d.Status != "failed" || d.Attempts != 1 || !strings.Contains(msg, "refusing to connect to") {
			t.Errorf("delivery to %s: %s after %d attempts (%s), want failed after 1 by the guard", d.EndpointID, d.Status, d.Attempts, msg)
		}
		if addr := byEndpoint[d.EndpointID]; addr != "" && !strings.Contains(msg, "refusing to connect to "+addr+" ") {
			t.Errorf("error %q does not name %s", msg, addr)
		}
	}
	if n := len(rc.requests()); n != 0 {
		t.Fatalf("receiver got %d requests through the guard", n)
	}

	// The same receiver is reachable once loopback is allowlisted, so the
	// refusals above were the guard's.
	open := newDispatcher(t, pool, nil)
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 2})
	sum, err = open.Drain(ctx, testWindow)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Sent < 2 || len(rc.requests()) < 2 {
		t.Fatalf("with loopback allowlisted: %+v, %d requests; want the loopback endpoints delivered", sum, len(rc.requests()))
	}
}

func TestAddressPolicy(t *testing.T) {
	t.Parallel()
	allow := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.1.0.0/16")}
	for _, tc := range []struct {
		addr      string
		deny      string // range reported without an allowlist; "" = allowed
		allowlist bool   // admitted by allow
	}{
		{"93.184.215.14", "", true},
		{"2606:2800:21f:cb07:6820:80da:af6b:8b2c", "", true},
		{"127.0.0.1", "loopback", true},
		{"127.255.255.254", "loopback", true},
		{"::1", "loopback", false},
		{"10.0.0.1", "private", false},
		{"10.1.2.3", "private", true},
		{"172.16.0.1", "private", false},
		{"192.168.1.1", "private", false},
		{"169.254.169.254", "link-local", false},
		{"100.64.0.1", "carrier-grade NAT", false},
		{"100.127.255.255", "carrier-grade NAT", false},
		{"224.0.0.1", "multicast", false},
		{"ff02::1", "multicast", false},
		{"0.0.0.0", "unspecified", false},
		{"::", "unspecified", false},
		{"255.255.255.255", "reserved", false},
		{"::ffff:127.0.0.1", "loopback", true}, // mapped: the IPv4 CIDR 127/8 admits it
		{"::ffff:10.1.2.3", "private", true},
		{"::ffff:10.0.0.1", "private", false}, // mapped, and no CIDR admits its IPv4 form
		{"::ffff:8.8.8.8", "IPv4-mapped IPv6", false},
		{"::ffff:169.254.169.254", "link-local", false},
		{"fc00::1", "private", false},
		{"fd12:3456::1", "private", false},
		{"fe80::1", "link-local", false},
		{"64:ff9b::a00:1", "NAT64", false},
		{"2002:a00:1::", "6to4", false},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			t.Parallel()
			addr := netip.MustParseAddr(tc.addr)
			err := addressPolicy{}.check(addr)
			var ae *AddressError
			switch {
			case tc.deny == "" && err != nil:
				t.Fatalf("public address refused: %v", err)
			case tc.deny != "" && (!errors.As(err, &ae) || ae.Range != tc.deny || !errors.Is(err, ErrForbiddenAddress)):
				t.Fatalf("check = %v, want refused as %s", err, tc.deny)
			case tc.deny != "" && !strings.Contains(err.Error(), addr.String()):
				t.Fatalf("error %q does not name the address", err)
			}
			if err := (addressPolicy{allowed: allow}).check(addr); (err == nil) != (tc.allowlist || tc.deny == "") {
				t.Fatalf("with allowlist %v: check = %v", allow, err)
			}
		})
	}
}

func TestAddressPolicyControl(t *testing.T) {
	t.Parallel()
	p := addressPolicy{}
	if err := p.control("tcp4", "169.254.169.254:80", nil); !errors.Is(err, ErrForbiddenAddress) {
		t.Errorf("control(metadata) = %v, want refusal", err)
	}
	if err := p.control("tcp6", "[fe80::1%eth0]:443", nil); !errors.Is(err, ErrForbiddenAddress) {
		t.Errorf("control(zoned link-local) = %v, want refusal", err)
	}
	if err := p.control("tcp", "not an address", nil); !errors.Is(err, ErrForbiddenAddress) {
		t.Errorf("control(garbage) = %v, want refusal (fail closed)", err)
	}
	if err := p.control("tcp4", "93.184.215.14:443", nil); err != nil {
		t.Errorf("control(public) = %v, want nil", err)
	}
}

// An IPv4-mapped IPv6 address is the IPv4 address it maps to, at dial time
// and at create time: an IPv4 CIDR admits it (localhost can resolve to
// ::ffff:127.0.0.1), the refusal names the CIDR that would admit it, and a
// mapped address no CIDR admits is refused as its IPv4 form would be.
func TestAddressPolicy_MappedAddressMeetsIPv4CIDRs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		allowed string // WEBHOOK_ALLOWED_CIDRS
		addr    string
		admit   string // the CIDR the refusal names; "" = admitted
	}{
		{"", "::ffff:127.0.0.1", "127.0.0.1/32"},
		{"127.0.0.1/32", "::ffff:127.0.0.1", ""},
		{"127.0.0.0/8,::1/128", "::ffff:127.0.0.1", ""},
		{"127.0.0.1/32", "::ffff:10.0.0.1", "10.0.0.1/32"},
		{"127.0.0.1/32", "::ffff:169.254.169.254", "169.254.169.254/32"},
		{"127.0.0.1/32", "10.0.0.1", "10.0.0.1/32"},
		{"127.0.0.1/32", "::1", "::1/128"},
		{"::ffff:127.0.0.1/128", "::ffff:127.0.0.1", ""}, // the mapped form, as it was allowlisted before
	} {
		t.Run(tc.allowed+"/"+tc.addr, func(t *testing.T) {
			t.Parallel()
			var cfg Settings
			if tc.allowed != "" {
				for s := range strings.SplitSeq(tc.allowed, ",") {
					cfg.AllowedCIDRs = append(cfg.AllowedCIDRs, netip.MustParsePrefix(s))
				}
			}
			policy := addressPolicy{allowed: cfg.AllowedCIDRs}
			dial := policy.control("tcp", netip.AddrPortFrom(netip.MustParseAddr(tc.addr), 443).String(), nil)
			created := CheckAddress(ctx, cfg, "https://"+netip.AddrPortFrom(netip.MustParseAddr(tc.addr), 443).String()+"/hook")
			for name, err := range map[string]error{"dial": dial, "create": created} {
				switch {
				case tc.admit == "" && err != nil:
					t.Errorf("%s: %v; want admitted", name, err)
				case tc.admit != "" && !errors.Is(err, ErrForbiddenAddress):
					t.Errorf("%s: %v; want refused", name, err)
				case tc.admit != "" && !strings.Contains(err.Error(), "admit it with "+EnvAllowedCIDRs+"="+tc.admit+")"):
					t.Errorf("%s: %q does not name the CIDR %s", name, err, tc.admit)
				}
			}
		})
	}
}
