package keyfuncs

import (
	"strings"
	"testing"
)

// The spoofing tables: each case is named after the forgery it guards against.
// 10.0.0.0/8 and fd00::/8 are the trusted proxies, 203.0.113.7 the real
// client, 198.51.100.66 what an attacker claims to be.

func TestSpoofXForwardedFor(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("198.51.100.66, ", 64<<10/15)
	runKeys(t, IP(TrustedProxies("10.0.0.0/8", "fd00::/8")), []keyCase{
		{"client behind one proxy", request("10.0.0.1:1", "X-Forwarded-For", "203.0.113.7"), "ip:203.0.113.7", nil},
		{"leftmost XFF forgery is not the client",
			request("10.0.0.1:1", "X-Forwarded-For", "198.51.100.66, 203.0.113.7"), "ip:203.0.113.7", nil},
		{"forged trusted address on the left is not walked to",
			request("10.0.0.1:1", "X-Forwarded-For", "10.9.9.9, 203.0.113.7, 10.0.0.2"), "ip:203.0.113.7", nil},
		{"duplicate XFF lines, attacker's line first",
			request("10.0.0.1:1", "X-Forwarded-For", "198.51.100.66", "X-Forwarded-For", "203.0.113.7"), "ip:203.0.113.7", nil},
		{"duplicate XFF lines are one list, walked across lines",
			request("10.0.0.1:1", "X-Forwarded-For", "198.51.100.66, 203.0.113.7", "X-Forwarded-For", "10.0.0.3, 10.0.0.2"), "ip:203.0.113.7", nil},
		{"XFF from an untrusted peer is ignored",
			request("203.0.113.7:1", "X-Forwarded-For", "198.51.100.66"), "ip:203.0.113.7", nil},
		{"XFF from an untrusted peer claiming a trusted address is ignored",
			request("203.0.113.7:1", "X-Forwarded-For", "10.0.0.2"), "ip:203.0.113.7", nil},
		{"peer aliased through IPv4-in-IPv6 is trusted",
			request("[::ffff:10.0.0.1]:1", "X-Forwarded-For", "203.0.113.7"), "ip:203.0.113.7", nil},
		{"trusted hop aliased through IPv4-in-IPv6 is walked past",
			request("10.0.0.1:1", "X-Forwarded-For", "203.0.113.7, ::ffff:10.0.0.2"), "ip:203.0.113.7", nil},
		{"client aliased through IPv4-in-IPv6 keys as IPv4",
			request("10.0.0.1:1", "X-Forwarded-For", "::ffff:203.0.113.7"), "ip:203.0.113.7", nil},
		{"untrusted client in IPv4-mapped form is not trusted by its IPv6 spelling",
			request("[::ffff:203.0.113.7]:1", "X-Forwarded-For", "198.51.100.66"), "ip:203.0.113.7", nil},
		{"zone id on a trusted hop does not break trust",
			request("[fd00::1%eth0]:1", "X-Forwarded-For", "203.0.113.7, fd00::2%eth1"), "ip:203.0.113.7", nil},
		{"entries with ports", request("10.0.0.1:1", "X-Forwarded-For", "[2001:db8::7]:4711, 10.0.0.2:80"), "ip:2001:db8::/64", nil},
		{"all entries trusted: the leftmost is the client",
			request("10.0.0.1:1", "X-Forwarded-For", "10.0.0.4, 10.0.0.3"), "ip:10.0.0.4", nil},
		{"garbage entry fails closed instead of skipping to a spoofable one",
			request("10.0.0.1:1", "X-Forwarded-For", "198.51.100.66, not-an-ip"), "", ErrInvalidForwarding},
		{"garbage between trusted hops fails closed",
			request("10.0.0.1:1", "X-Forwarded-For", "198.51.100.66, unknown, 10.0.0.2"), "", ErrInvalidForwarding},
		{"empty entry fails closed", request("10.0.0.1:1", "X-Forwarded-For", "198.51.100.66, , 10.0.0.2"), "", ErrInvalidForwarding},
		{"empty XFF line from trusted proxy fails closed", request("10.0.0.1:1", "X-Forwarded-For", ""), "", ErrInvalidForwarding},
		{"garbage left of the client is never reached",
			request("10.0.0.1:1", "X-Forwarded-For", "<script>, 203.0.113.7"), "ip:203.0.113.7", nil},
		{"trusted proxy without XFF (a health check) is the proxy's own bucket", request("10.0.0.1:1"), "ip:10.0.0.1", nil},
		{"64 KiB XFF prefix from the client is never walked",
			request("10.0.0.1:1", "X-Forwarded-For", huge+"203.0.113.7"), "ip:203.0.113.7", nil},
		{"64 KiB entry fails closed", request("10.0.0.1:1", "X-Forwarded-For", strings.Repeat("9", 64<<10)), "", ErrInvalidForwarding},
		{"64 KiB of trusted entries hits MaxHops",
			request("10.0.0.1:1", "X-Forwarded-For", strings.Repeat("10.0.0.2,", 64<<10/9)+"10.0.0.3"), "", ErrInvalidForwarding},
		{"MaxHops trusted entries are fine",
			request("10.0.0.1:1", "X-Forwarded-For", strings.Repeat("10.0.0.2,", MaxHops-1)+"10.0.0.3"), "ip:10.0.0.2", nil},
		{"Forwarded is not read by TrustedProxies alone: no fall-through",
			request("10.0.0.1:1", "Forwarded", "for=203.0.113.7"), "ip:10.0.0.1", nil},
		{"X-Real-IP is not read by TrustedProxies: no fall-through",
			request("10.0.0.1:1", "X-Real-IP", "198.51.100.66"), "ip:10.0.0.1", nil},
		{"XFF sent with another header name casing is the same header",
			request("10.0.0.1:1", "x-forwarded-for", "198.51.100.66, 203.0.113.7"), "ip:203.0.113.7", nil},
	})
}

func TestSpoofForwarded(t *testing.T) {
	t.Parallel()
	runKeys(t, IP(TrustedProxies("10.0.0.0/8", "fd00::/8"), ForwardedHeader()), []keyCase{
		{"client behind one proxy", request("10.0.0.1:1", "Forwarded", "for=203.0.113.7"), "ip:203.0.113.7", nil},
		{"quoted IPv6 with port", request("10.0.0.1:1", "Forwarded", `for="[2001:db8:cafe::17]:4711"`), "ip:2001:db8:cafe::/64", nil},
		{"parameters in any order and case",
			request("10.0.0.1:1", "Forwarded", "proto=https;By=10.0.0.1;FOR=203.0.113.7;host=example.com"), "ip:203.0.113.7", nil},
		{"leftmost Forwarded forgery is not the client",
			request("10.0.0.1:1", "Forwarded", "for=198.51.100.66, for=203.0.113.7"), "ip:203.0.113.7", nil},
		{"duplicate Forwarded lines, attacker's line first",
			request("10.0.0.1:1", "Forwarded", "for=198.51.100.66", "Forwarded", "for=203.0.113.7;proto=https"), "ip:203.0.113.7", nil},
		{"Forwarded from an untrusted peer is ignored",
			request("203.0.113.7:1", "Forwarded", "for=198.51.100.66"), "ip:203.0.113.7", nil},
		{"trusted hops walked past", request("10.0.0.1:1", "Forwarded", `for=203.0.113.7, for="[fd00::2]", for=10.0.0.3:80`), "ip:203.0.113.7", nil},
		{"trusted hop aliased through IPv4-in-IPv6 is walked past",
			request("10.0.0.1:1", "Forwarded", `for=203.0.113.7, for="[::ffff:10.0.0.2]"`), "ip:203.0.113.7", nil},
		{"unknown node stops the walk", request("10.0.0.1:1", "Forwarded", "for=198.51.100.66, for=unknown"), "", ErrUnidentifiedClient},
		{"unknown node with port stops the walk", request("10.0.0.1:1", "Forwarded", `for="unknown:4711"`), "", ErrUnidentifiedClient},
		{"obfuscated node stops the walk", request("10.0.0.1:1", "Forwarded", "for=198.51.100.66, for=_hidden, for=10.0.0.2"), "", ErrUnidentifiedClient},
		{"obfuscated node with obfuscated port", request("10.0.0.1:1", "Forwarded", `for="_SEVKISEK:_abc"`), "", ErrUnidentifiedClient},
		{"obfuscated port on an address is fine", request("10.0.0.1:1", "Forwarded", `for="203.0.113.7:_abc"`), "ip:203.0.113.7", nil},
		{"element without for= stops the walk", request("10.0.0.1:1", "Forwarded", "for=198.51.100.66, proto=https"), "", ErrUnidentifiedClient},
		{"empty element stops the walk", request("10.0.0.1:1", "Forwarded", "for=198.51.100.66,,for=10.0.0.2"), "", ErrUnidentifiedClient},
		{"unknown left of the client is never reached", request("10.0.0.1:1", "Forwarded", "for=unknown, for=203.0.113.7"), "ip:203.0.113.7", nil},
		{"garbage node fails closed", request("10.0.0.1:1", "Forwarded", "for=198.51.100.66, for=evil.example"), "", ErrInvalidForwarding},
		{"duplicate for= in one element fails closed",
			request("10.0.0.1:1", "Forwarded", "for=10.0.0.2;for=198.51.100.66"), "", ErrInvalidForwarding},
		{"quoted comma cannot split an element",
			request("10.0.0.1:1", "Forwarded", `for=198.51.100.66;host="a, for=10.0.0.2"`), "ip:198.51.100.66", nil},
		{"unbalanced quote from the client fails closed",
			request("10.0.0.1:1", "Forwarded", `for="198.51.100.66, for=203.0.113.7`), "", ErrInvalidForwarding},
		{"escape in a for= value fails closed", request("10.0.0.1:1", "Forwarded", `for="203.0.113.\7"`), "", ErrInvalidForwarding},
		{"unquoted IPv6 is tolerated", request("10.0.0.1:1", "Forwarded", "for=[2001:db8::1]:80"), "ip:2001:db8::/64", nil},
		{"bracketed IPv4 fails closed", request("10.0.0.1:1", "Forwarded", `for="[203.0.113.7]"`), "", ErrInvalidForwarding},
		{"pair without value fails closed", request("10.0.0.1:1", "Forwarded", "for="), "", ErrInvalidForwarding},
		{"control character fails closed", request("10.0.0.1:1", "Forwarded", "for=203.0.113.7\x00"), "", ErrInvalidForwarding},
		{"trusted proxy without Forwarded is the proxy's own bucket", request("10.0.0.1:1"), "ip:10.0.0.1", nil},
		{"no fall-through to X-Forwarded-For",
			request("10.0.0.1:1", "X-Forwarded-For", "203.0.113.7"), "ip:10.0.0.1", nil},
		{"64 KiB of trusted elements hits MaxHops",
			request("10.0.0.1:1", "Forwarded", strings.Repeat("for=10.0.0.2,", 64<<10/13)+"for=10.0.0.3"), "", ErrInvalidForwarding},
		{"64 KiB Forwarded prefix from the client is never walked",
			request("10.0.0.1:1", "Forwarded", strings.Repeat("for=198.51.100.66,", 64<<10/18)+"for=203.0.113.7"), "ip:203.0.113.7", nil},
	})
}

func TestSpoofTrustedHeader(t *testing.T) {
	t.Parallel()
	runKeys(t, IP(TrustedHeader("CF-Connecting-IP", "10.0.0.0/8")), []keyCase{
		{"client from the edge", request("10.0.0.1:1", "CF-Connecting-IP", "203.0.113.7"), "ip:203.0.113.7", nil},
		{"IPv6 client from the edge", request("10.0.0.1:1", "CF-Connecting-IP", "2001:db8::7"), "ip:2001:db8::/64", nil},
		{"trusted single header sent by an untrusted peer is ignored",
			request("198.51.100.66:1", "CF-Connecting-IP", "203.0.113.7"), "ip:198.51.100.66", nil},
		{"the edge's own request without the header is its own bucket", request("10.0.0.1:1"), "ip:10.0.0.1", nil},
		{"empty header from the edge is an error", request("10.0.0.1:1", "CF-Connecting-IP", " "), "", ErrMissingHeader},
		{"no fall-through to X-Forwarded-For",
			request("10.0.0.1:1", "X-Forwarded-For", "203.0.113.7"), "ip:10.0.0.1", nil},
		{"no fall-through to X-Real-IP",
			request("10.0.0.1:1", "X-Real-IP", "203.0.113.7"), "ip:10.0.0.1", nil},
		{"header repeated by a client the edge did not strip is an error",
			request("10.0.0.1:1", "CF-Connecting-IP", "198.51.100.66", "CF-Connecting-IP", "203.0.113.7"), "", ErrRepeatedHeader},
		{"list in a single header is an error",
			request("10.0.0.1:1", "CF-Connecting-IP", "198.51.100.66, 203.0.113.7"), "", ErrInvalidForwarding},
		{"garbage is an error", request("10.0.0.1:1", "CF-Connecting-IP", "localhost"), "", ErrInvalidForwarding},
		{"64 KiB value is an error", request("10.0.0.1:1", "CF-Connecting-IP", strings.Repeat("1", 64<<10)), "", ErrInvalidForwarding},
		{"IPv4-mapped value keys as IPv4", request("10.0.0.1:1", "CF-Connecting-IP", "::ffff:203.0.113.7"), "ip:203.0.113.7", nil},
		{"peer aliased through IPv4-in-IPv6 is trusted",
			request("[::ffff:10.0.0.1]:1", "CF-Connecting-IP", "203.0.113.7"), "ip:203.0.113.7", nil},
		{"zone on the value is dropped", request("10.0.0.1:1", "CF-Connecting-IP", "fe80::1%eth0"), "ip:fe80::/64", nil},
	})
}

func TestSpoofNoTrustOption(t *testing.T) {
	t.Parallel()
	runKeys(t, IP(), []keyCase{
		{"XFF is ignored without a trust option", request("203.0.113.7:1", "X-Forwarded-For", "198.51.100.66"), "ip:203.0.113.7", nil},
		{"XFF is ignored even from a private peer", request("10.0.0.1:1", "X-Forwarded-For", "198.51.100.66"), "ip:10.0.0.1", nil},
		{"Forwarded is ignored", request("203.0.113.7:1", "Forwarded", "for=198.51.100.66"), "ip:203.0.113.7", nil},
		{"X-Real-IP is ignored", request("203.0.113.7:1", "X-Real-IP", "198.51.100.66"), "ip:203.0.113.7", nil},
		{"CF-Connecting-IP is ignored", request("203.0.113.7:1", "CF-Connecting-IP", "198.51.100.66"), "ip:203.0.113.7", nil},
	})
	runKeys(t, IP(TrustedProxies()), []keyCase{
		{"TrustedProxies with no networks trusts nobody", request("10.0.0.1:1", "X-Forwarded-For", "198.51.100.66"), "ip:10.0.0.1", nil},
	})
}
