package main

import (
	"net/netip"
	"strings"
	"testing"
)

func TestRefusal(t *testing.T) {
	cases := []struct {
		addr string
		want string // "" when allowed
	}{
		// IPv4 refused
		{"0.0.0.0", "the unspecified address"},
		{"0.1.2.3", `a "this network" address`},
		{"10.0.0.1", "a private address"},
		{"10.255.255.255", "a private address"},
		{"100.64.0.1", "a shared (carrier-grade NAT) address"},
		{"100.127.255.254", "a shared (carrier-grade NAT) address"},
		{"127.0.0.1", "a loopback address"},
		{"127.255.0.9", "a loopback address"},
		{"169.254.169.254", "a link-local address"}, // cloud metadata
		{"172.16.0.1", "a private address"},
		{"172.31.255.255", "a private address"},
		{"192.0.0.8", "an IETF protocol assignment address"},
		{"192.0.2.10", "a documentation address"},
		{"192.88.99.1", "a 6to4 relay address"},
		{"192.168.1.1", "a private address"},
		{"198.18.0.1", "a benchmarking address"},
		{"198.19.255.255", "a benchmarking address"},
		{"198.51.100.7", "a documentation address"},
		{"203.0.113.9", "a documentation address"},
		{"224.0.0.251", "a multicast address"},
		{"239.255.255.250", "a multicast address"},
		{"240.0.0.1", "a reserved address"},
		{"255.255.255.255", "the broadcast address"},
		// IPv4 allowed, including the neighbours of refused ranges
		{"1.1.1.1", ""},
		{"8.8.8.8", ""},
		{"93.184.215.14", ""},
		{"11.0.0.1", ""},
		{"100.63.255.255", ""},
		{"100.128.0.0", ""},
		{"126.255.255.255", ""},
		{"128.0.0.1", ""},
		{"169.253.255.255", ""},
		{"172.15.255.255", ""},
		{"172.32.0.0", ""},
		{"192.0.1.1", ""},
		{"192.167.255.255", ""},
		{"192.169.0.0", ""},
		{"198.17.255.255", ""},
		{"198.20.0.0", ""},
		{"223.255.255.255", ""},

		// IPv6 refused
		{"::", "the unspecified address"},
		{"::1", "a loopback address"},
		{"::ffff:127.0.0.1", "an IPv4-mapped address of 127.0.0.1, a loopback address"},
		{"::ffff:10.1.2.3", "an IPv4-mapped address of 10.1.2.3, a private address"},
		{"::ffff:169.254.169.254", "an IPv4-mapped address of 169.254.169.254, a link-local address"},
		{"::ffff:0.0.0.0", "an IPv4-mapped address of 0.0.0.0, the unspecified address"},
		{"::127.0.0.1", "a reserved address"}, // IPv4-compatible, deprecated
		{"::ffff:0:7f00:1", "a reserved address"},
		{"64:ff9b::127.0.0.1", "a NAT64 address of 127.0.0.1, a loopback address"},
		{"64:ff9b::c0a8:101", "a NAT64 address of 192.168.1.1, a private address"},
		{"64:ff9b::100.64.0.1", "a NAT64 address of 100.64.0.1, a shared (carrier-grade NAT) address"},
		{"64:ff9b:1::a00:1", "a reserved address"}, // local-use NAT64
		{"2002:7f00:1::1", "a 6to4 address of 127.0.0.1, a loopback address"},
		{"2002:c0a8:101::", "a 6to4 address of 192.168.1.1, a private address"},
		{"100::1", "a discard-only address"},
		{"2001::1", "an IETF protocol assignment address"}, // Teredo
		{"2001:2::1", "an IETF protocol assignment address"},
		{"2001:db8::1", "a documentation address"},
		{"3fff::1", "a documentation address"},
		{"fc00::1", "a unique local (private) address"},
		{"fd12:3456:789a::1", "a unique local (private) address"},
		{"fe80::1", "a link-local address"},
		{"fe80::1%eth0", "a link-local address"},
		{"febf::1", "a link-local address"},
		{"fec0::1", "a site-local address"},
		{"ff02::1", "a multicast address"},
		{"ff05::1:3", "a multicast address"},
		{"4000::1", "a reserved address"},
		{"5f00::1", "a reserved address"},
		// IPv6 allowed
		{"2606:4700:4700::1111", ""},
		{"2a00:1450:4007:80e::200e", ""},
		{"2001:4860:4860::8888", ""},
		{"::ffff:8.8.8.8", ""},
		{"64:ff9b::808:808", ""},
		{"2002:808:808::1", ""},
		{"3ffe::1", ""},
	}
	for _, c := range cases {
		addr := netip.MustParseAddr(c.addr)
		if got := refusal(addr); got != c.want {
			t.Errorf("%s: %q, want %q", c.addr, got, c.want)
		}
	}
	if got := refusal(netip.Addr{}); got == "" {
		t.Error("the zero Addr is allowed")
	}
}

func TestGuardControl(t *testing.T) {
	g := guard{allow: map[netip.AddrPort]bool{netip.MustParseAddrPort("127.0.0.1:8443"): true}}
	cases := []struct {
		network, address string
		want             string // part of the error, "" when allowed
	}{
		{"tcp4", "127.0.0.1:8443", ""}, // allowed by exact address and port
		{"tcp4", "127.0.0.1:8444", "127.0.0.1 is a loopback address"},
		{"tcp4", "127.0.0.2:8443", "127.0.0.2 is a loopback address"},
		{"tcp6", "[::1]:8443", "::1 is a loopback address"},
		{"tcp6", "[::ffff:127.0.0.1]:8443", "::ffff:127.0.0.1 is an IPv4-mapped address of 127.0.0.1"},
		{"tcp6", "[fe80::1%eth0]:443", "fe80::1 is a link-local address"},
		{"tcp4", "192.168.0.10:443", "192.168.0.10 is a private address"},
		{"tcp4", "1.1.1.1:443", ""},
		{"tcp6", "[2606:4700:4700::1111]:443", ""},
		{"udp4", "1.1.1.1:443", "TCP only"},
		{"tcp", "localhost:443", "not an IP address"},
	}
	for _, c := range cases {
		err := g.control(c.network, c.address, nil)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s %s: %v", c.network, c.address, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s %s: %v, want %q", c.network, c.address, err, c.want)
		}
	}
	// The production guard allows no loopback at all.
	if err := (guard{}).control("tcp4", "127.0.0.1:8443", nil); err == nil {
		t.Error("zero guard allows loopback")
	}
}

func TestRefusedErrorNamesHost(t *testing.T) {
	e := &refusedError{host: "evil.test", addr: netip.MustParseAddr("127.0.0.1"), reason: "a loopback address"}
	if got, want := e.Error(), "evil.test resolves to 127.0.0.1, a loopback address"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	e.host = "127.0.0.1"
	if got, want := e.Error(), "127.0.0.1 is a loopback address"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}
