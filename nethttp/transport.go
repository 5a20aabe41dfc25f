package nethttp

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/ratelimit/core"
)

// Transport returns an http.RoundTripper for outbound calls that share one
// limit across every instance using l's store: before each request it
// waits, in l.WaitN, for the request's tokens (one, or WithCost's) of the
// request's key (WithKey; default the URL's host, one key for every
// spelling of it: case, trailing dot, default or zero-padded port,
// IPv4-mapped IPv6), booked in the order the
// requests reach the store, so instances never poll or herd. l needs a
// Config.MaxWait: a request that would wait longer, or past its context's
// deadline, is not sent, and RoundTrip returns the error of WaitN at once
// (errors.Is core.ErrWaitTooLong; errors.As *core.WaitError says how
// long). Store trouble is l's FailMode's: FailOpen sends at once,
// FailClosed fails (core.ErrUnavailable), FailLocal waits on the
// in-process bucket.
//
// An upstream's 429 or 503 with a Retry-After (seconds, or an HTTP date)
// makes the key's bucket owe what refills in that time (at most a day)
// before RoundTrip returns the upstream's response, which it passes on as
// it is: it never retries. So every instance pauses, not only the one that
// was refused. Requests of this Transport booked before it learnt of the
// pause are held until the pause ends, or fail as a wait too long
// (core.ErrWaitTooLong) when it ends past Config.MaxWait or their
// context's deadline; those of other instances may still go (at most
// what they booked).
//
// Everything else is base's (http.DefaultTransport when nil): the request,
// its body and context, connection reuse. A request Transport does not
// send has its body closed, as RoundTrip must. WithKey, WithCost,
// WithSkip (sent at once, not counted) and WithLimitFunc (the request's
// limit, l.With) apply; Transport panics if l is nil, an option is nil, or
// an option applies only to serving requests (a deny handler, headers…).
func Transport(l *core.Limiter, base http.RoundTripper, opts ...Option) http.RoundTripper {
	if l == nil {
		panic("nethttp: Transport: nil *core.Limiter")
	}
	if base == nil {
		base = http.DefaultTransport
	}
	var c config
	for _, o := range opts {
		if o == nil {
			panic("nethttp: nil Option")
		}
		o(&c)
	}
	if c.deny != nil || c.onError != nil || c.observe != nil || c.style != 0 || c.dryRun || c.pick != nil ||
		c.routes != nil || c.mux != nil || c.now != nil || c.logger != nil || c.countIf != nil || c.delay != 0 ||
		c.also != nil {
		panic("nethttp: Transport takes only WithKey, WithCost, WithSkip and WithLimitFunc")
	}
	return &transport{l: l, base: base, key: c.key, cost: c.cost, skip: c.skip, limitOf: c.limitOf, paused: map[string]time.Time{}}
}

type transport struct {
	l       *core.Limiter
	base    http.RoundTripper
	key     func(*http.Request) (string, error) // nil: the URL's host
	cost    func(*http.Request) int
	skip    func(*http.Request) bool
	limitOf func(*http.Request) (core.Limit, error)

	mu     sync.Mutex
	paused map[string]time.Time // key → when the upstream's pause ends; the ended are pruned
}

// maxPause bounds the pause an upstream's Retry-After asks for.
const maxPause = 24 * time.Hour

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.skip != nil && t.skip(req) {
		return t.base.RoundTrip(req)
	}
	l, key, err := t.decide(req)
	if err == nil {
		n := 1
		if t.cost != nil {
			n = t.cost(req)
		}
		err = l.WaitN(req.Context(), key, n)
	}
	if err == nil {
		err = t.hold(req.Context(), l, key)
	}
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("nethttp: Transport: %w", err)
	}
	resp, err := t.base.RoundTrip(req)
	if err == nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) {
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok && d > 0 {
			t.pause(key, time.Now().Add(d))
			// Recorded even when the caller has gone: every instance
			// must learn of it.
			_, _ = l.Pause(context.WithoutCancel(req.Context()), key, d)
		}
	}
	return resp, err
}

// pause records that key's upstream pauses until end, for the requests
// of this Transport that booked before: hold holds them.
func (t *transport) pause(key string, end time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	for k, e := range t.paused {
		if !e.After(now) {
			delete(t.paused, k)
		}
	}
	if end.After(t.paused[key]) {
		t.paused[key] = end
	}
}

// hold waits, after its booking's turn, until the pause of key (if any)
// ends: a request booked before its Transport learnt of the pause must
// not reach the upstream inside it. A pause that ends past l's MaxWait or
// ctx's deadline is a wait too long, as WaitN's.
func (t *transport) hold(ctx context.Context, l *core.Limiter, key string) error {
	t.mu.Lock()
	end, ok := t.paused[key]
	t.mu.Unlock()
	if !ok {
		return nil
	}
	d := time.Until(end)
	if d <= 0 {
		return nil
	}
	most := l.MaxWait()
	if dl, ok := ctx.Deadline(); ok {
		most = max(0, min(most, time.Until(dl)))
	}
	if d > most {
		return &core.WaitError{Wait: d, Max: most}
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// decide returns the limiter for req (l, or l under WithLimitFunc's limit)
// and req's key.
func (t *transport) decide(req *http.Request) (*core.Limiter, string, error) {
	l := t.l
	if t.limitOf != nil {
		lim, err := t.limitOf(req)
		if err != nil {
			return nil, "", err
		}
		if l, err = l.With(lim); err != nil {
			return nil, "", err
		}
	}
	if t.key == nil {
		host := req.URL.Host
		if host == "" {
			host = req.Host
		}
		return l, hostKey(req.URL.Scheme, host), nil
	}
	key, err := t.key(req)
	return l, key, err
}

// hostKey returns one key for every spelling of one upstream: the host
// in lower case without a trailing dot, an IP address in its one form
// (IPv4-mapped IPv6 unmapped, zeros compressed), the port as a number
// and dropped when it is the scheme's default. An attacker who can pick
// the URL cannot split the upstream's shared bucket (issue 44).
func hostKey(scheme, hostport string) string {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), ""
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.Unmap().String()
	}
	if port != "" {
		if p, err := strconv.ParseUint(port, 10, 16); err == nil {
			port = strconv.FormatUint(p, 10)
		}
	}
	switch {
	case port == "", port == "80" && strings.EqualFold(scheme, "http"), port == "443" && strings.EqualFold(scheme, "https"):
		if strings.Contains(host, ":") {
			return "[" + host + "]"
		}
		return host
	}
	return net.JoinHostPort(host, port)
}

// retryAfter reads a Retry-After field at now: delay-seconds or an
// HTTP-date (RFC 9110, 10.2.3), at most maxPause however it is spelt.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if strings.Trim(v, "0123456789") == "" {
		// delay-seconds of any length: past a day (and past 2^64) is a day.
		if s, err := strconv.ParseUint(v, 10, 64); err == nil && s <= uint64(maxPause/time.Second) {
			return time.Duration(s) * time.Second, true
		}
		return maxPause, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(at.Sub(now), maxPause), true
}
