// Package keyfuncs turns an HTTP request into a rate-limiting key: the
// client's IP address (with explicit trust in proxies), an API key header, a
// user ID, or a combination.
//
// A KeyFunc returns a non-empty key or an error, never an empty key: an
// empty key would put every client in one global bucket. Keys never carry
// raw client input: addresses are parsed and re-printed, header values and
// unusual user IDs are hashed, and client-controlled values are capped at
// MaxValueLen bytes. The formats, which are stable:
//
//	ip:203.0.113.7               IP, IPv4 (one address by default)
//	ip:2001:db8:1:2::/64         IP, IPv6 (a /64 by default)
//	hdr:<22 base64url chars>     Header: 128 bits of SHA-256 of name and value
//	user:alice@example.com       User, ContextValue, ContextUser
//	user#<22 base64url chars>    the same, for IDs that are long or unusual
//	join:ip:203.0.113.7|user:bob Join (join#<hash> for long or unusual parts)
//
// # Which client address
//
// Forwarding headers are written by whoever sends them. IP believes one only
// when an option says so and the request arrives from a peer (RemoteAddr)
// inside the networks that option trusts, and it never falls back from one
// header to another. Choose by deployment:
//
//   - Clients connect directly (no proxy, or a TCP/L4 load balancer that
//     keeps the source address): IP(). Forwarding headers are ignored.
//   - Behind proxies or load balancers you run, on known networks, that
//     append to X-Forwarded-For (nginx, HAProxy, Envoy, a cloud L7 load
//     balancer): IP(TrustedProxies("10.0.0.0/8")). The list is walked from
//     the right past the trusted proxies; the first other address is the
//     client.
//   - Behind Cloudflare (or another edge that overwrites one header with the
//     client address): IP(TrustedHeader("CF-Connecting-IP", cloudflareCIDRs...))
//     with the edge's published ranges, or the networks of your own proxy
//     that passes the header on.
//   - Behind a CDN or proxy chain that writes RFC 7239 Forwarded:
//     IP(TrustedProxies(cidrs...), ForwardedHeader()). Nodes that hide the
//     client ("unknown", "_obfuscated") are an error, not skipped.
//
// Trusting too much is the dangerous mistake: a trusted network that clients
// can also connect from lets them choose their own key. Trusting too little
// (a missing proxy network) keys clients by the proxy's address, one bucket
// for all of them behind it.
//
// # Errors
//
// Every failure is one of the Err sentinels, possibly wrapped with a header
// name; match it with errors.Is. No error carries client-supplied text. The walks fail closed: an entry that
// is not an address, a hidden node or a trusted proxy that forwards nothing
// is an error, never a reason to look further left, where the client writes.
package keyfuncs
