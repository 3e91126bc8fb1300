package main

import (
	"fmt"
	"net/netip"
	"strings"
	"syscall"
)

// The guard keeps web_fetch on the public internet: the model chooses the
// URL, and a page it read may have chosen it for it, so nothing may reach the
// machine itself, the home network (where the media stack and its admin
// pages live) or any other address that is not a public unicast one.

// rangeRule is a range of addresses web_fetch refuses and why.
type rangeRule struct {
	prefix netip.Prefix
	reason string
}

func rules(spec ...string) []rangeRule {
	var rs []rangeRule
	for i := 0; i < len(spec); i += 2 {
		rs = append(rs, rangeRule{netip.MustParsePrefix(spec[i]), spec[i+1]})
	}
	return rs
}

// refusedV4 lists IPv4's special-purpose ranges (IANA's registry, RFC 6890
// and successors): none of them is a public web server. The first match
// names the reason, so exact addresses come before their ranges.
var refusedV4 = rules(
	"0.0.0.0/32", "the unspecified address",
	"0.0.0.0/8", `a "this network" address`,
	"10.0.0.0/8", "a private address",
	"100.64.0.0/10", "a shared (carrier-grade NAT) address",
	"127.0.0.0/8", "a loopback address",
	"169.254.0.0/16", "a link-local address",
	"172.16.0.0/12", "a private address",
	"192.0.0.0/24", "an IETF protocol assignment address",
	"192.0.2.0/24", "a documentation address",
	"192.88.99.0/24", "a 6to4 relay address",
	"192.168.0.0/16", "a private address",
	"198.18.0.0/15", "a benchmarking address",
	"198.51.100.0/24", "a documentation address",
	"203.0.113.0/24", "a documentation address",
	"224.0.0.0/4", "a multicast address",
	"255.255.255.255/32", "the broadcast address",
	"240.0.0.0/4", "a reserved address",
)

// refusedV6 lists IPv6's special-purpose ranges inside global unicast
// (2000::/3) and the named ones outside it; everything else outside
// 2000::/3 is refused as reserved.
var refusedV6 = rules(
	"::/128", "the unspecified address",
	"::1/128", "a loopback address",
	"100::/64", "a discard-only address",
	"2001::/23", "an IETF protocol assignment address", // Teredo, benchmarking, ORCHID among them
	"2001:db8::/32", "a documentation address",
	"3fff::/20", "a documentation address",
	"fc00::/7", "a unique local (private) address",
	"fe80::/10", "a link-local address",
	"fec0::/10", "a site-local address",
	"ff00::/8", "a multicast address",
)

var (
	globalUnicast = netip.MustParsePrefix("2000::/3")
	nat64         = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour     = netip.MustParsePrefix("2002::/16")
)

// refusal says why web_fetch must not connect to addr, or "" when it may.
// Addresses that carry an IPv4 address (IPv4-mapped, NAT64, 6to4) are
// judged by it: ::ffff:127.0.0.1 reaches the loopback as surely as
// 127.0.0.1 does.
func refusal(addr netip.Addr) string {
	addr = addr.WithZone("")
	switch {
	case !addr.IsValid():
		return "not an IP address"
	case addr.Is4In6():
		return embedded("an IPv4-mapped address", addr.Unmap())
	case nat64.Contains(addr):
		b := addr.As16()
		return embedded("a NAT64 address", netip.AddrFrom4([4]byte(b[12:16])))
	case sixToFour.Contains(addr):
		b := addr.As16()
		return embedded("a 6to4 address", netip.AddrFrom4([4]byte(b[2:6])))
	case addr.Is4():
		return match(refusedV4, addr)
	}
	if r := match(refusedV6, addr); r != "" {
		return r
	}
	if !globalUnicast.Contains(addr) {
		return "a reserved address"
	}
	return ""
}

func match(rs []rangeRule, addr netip.Addr) string {
	for _, r := range rs {
		if r.prefix.Contains(addr) {
			return r.reason
		}
	}
	return ""
}

// embedded judges an IPv6 address by the IPv4 address inside it.
func embedded(kind string, v4 netip.Addr) string {
	if r := match(refusedV4, v4); r != "" {
		return fmt.Sprintf("%s of %s, %s", kind, v4, r)
	}
	return ""
}

// refusedError is a connection the guard refused.
type refusedError struct {
	host   string // the name that resolved to addr, if any
	addr   netip.Addr
	reason string
}

func (e *refusedError) Error() string {
	if e.host != "" && e.host != e.addr.String() {
		return fmt.Sprintf("%s resolves to %s, %s", e.host, e.addr, e.reason)
	}
	return fmt.Sprintf("%s is %s", e.addr, e.reason)
}

// guard decides which addresses may be connected to. Its zero value is the
// production guard; allow lets tests reach their own servers on loopback,
// by exact address and port.
type guard struct {
	allow map[netip.AddrPort]bool
}

func (g guard) check(ap netip.AddrPort) error {
	if g.allow[ap] {
		return nil
	}
	if r := refusal(ap.Addr()); r != "" {
		return &refusedError{addr: ap.Addr().WithZone(""), reason: r}
	}
	return nil
}

// control is the net.Dialer's Control: it runs after the name was resolved,
// just before the socket connects, with the address actually dialled, so no
// resolver trick (DNS rebinding, a second answer) can route around the
// guard.
func (g guard) control(network, address string, _ syscall.RawConn) error {
	if !strings.HasPrefix(network, "tcp") {
		return fmt.Errorf("web_fetch connects over TCP only, not %s", network)
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("refusing to connect to %q: not an IP address and port", address)
	}
	return g.check(ap)
}
