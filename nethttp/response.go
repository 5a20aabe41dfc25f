package nethttp

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/keyfuncs"
)

// Responses are RFC 9457 problem documents with fixed text: nothing from the
// request or from an internal error ever reaches the body.
var (
	bodyFailure = []byte(`{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"rate limit could not be applied"}`)
)

// DenyHandler writes the response to a request the limiter refused.
// Before it runs, the rate-limit fields of the header style and Retry-After
// are already set on w.Header(). res.Degraded reports that the store could
// not decide and the limiter's FailMode refused: core.FailClosed, or
// core.FailLocal's in-process bucket (res.Fallback).
type DenyHandler func(w http.ResponseWriter, r *http.Request, res core.Result)

// ErrorHandler writes the response to a request that could not be rate
// limited: err matches ErrKey (errors.Is) when the KeyFunc failed or gave an
// empty key; otherwise it is core.Limiter.AllowN's error for a cost that can
// never be allowed (core.ErrInvalidCost, core.ErrCostTooHigh: a bug in the
// WithCost function), or a WithLimitFunc function's error, or
// core.Limiter.AllowLimit's for the limit it gave (core.ErrInvalidLimit).
type ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)

// DefaultDenyHandler is the DenyHandler used unless WithDenyHandler replaces
// it. It writes 429 Too Many Requests, or 503 Service Unavailable for a
// blanket denial while the store is down (core.FailClosed), with an
// application/problem+json body. A denial by core.FailLocal's in-process
// bucket (res.Fallback) is a real, if approximate, limit: 429.
//
//	{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"rate limit exceeded; retry in 20 seconds"}
//	{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"rate limiting is unavailable; retry in 1 second"}
//
// The seconds are those of Retry-After. It writes the status and body
// only: the header fields are the Gate's, set before it runs. To refuse
// from a handler with the whole response, use Gate.ServeKey.
func DefaultDenyHandler(w http.ResponseWriter, r *http.Request, res core.Result) {
	deny(w, res, `{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"rate limit exceeded; retry in `)
}

// denySlots is the default response of Concurrency to a request refused
// because every slot of its key is held: DefaultDenyHandler's, saying so.
//
//	{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"too many requests in flight; retry in 1 second"}
func denySlots(w http.ResponseWriter, res core.Result) {
	deny(w, res, `{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"too many requests in flight; retry in `)
}

// deny writes a 429 whose detail starts as start says, or the 503 of a
// blanket refusal while the store is down.
func deny(w http.ResponseWriter, res core.Result, start string) {
	secs := retrySeconds(res.RetryAfter)
	var buf [160]byte
	b := buf[:0]
	status := http.StatusTooManyRequests
	if res.Degraded && !res.Fallback {
		status = http.StatusServiceUnavailable
		b = append(b, `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"rate limiting is unavailable; retry in `...)
	} else {
		b = append(b, start...)
	}
	b = strconv.AppendInt(b, secs, 10)
	if secs == 1 {
		b = append(b, ` second"}`...)
	} else {
		b = append(b, ` seconds"}`...)
	}
	writeProblem(w, status, b)
}

// DefaultErrorHandler is the ErrorHandler used unless WithErrorHandler
// replaces it. A key error (errors.Is(err, ErrKey)) gets 400 Bad Request
// with a detail naming what is missing or unreadable (a header's name, the
// client address, the user), never what the client sent; anything else
// (an empty key from the key function, an invalid cost or limit: the
// server's bugs) gets 500 Internal Server Error. Each body is an
// application/problem+json document; err's text is never sent:
//
//	{"type":"about:blank","title":"Bad Request","status":400,"detail":"missing rate-limit key: header X-Api-Key is required"}
//	{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"rate limit could not be applied"}
func DefaultErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, ErrKey) {
		writeProblem(w, http.StatusBadRequest, badKeyBody(err))
		return
	}
	writeProblem(w, http.StatusInternalServerError, bodyFailure)
}

// writeProblem writes a problem document in one Write, so net/http sets
// Content-Length itself (and a compressing middleware can still change the
// body). The header values are this response's own.
func writeProblem(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	v := &[2]string{"application/problem+json", "nosniff"}
	h["Content-Type"], h["X-Content-Type-Options"] = v[0:1:1], v[1:2:2]
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// badKeyBody is the 400 problem document for a key error: its detail
// names what is missing or cannot be read (a header's name, which the
// server configured), never what the client sent.
func badKeyBody(err error) []byte {
	var detail string
	switch {
	case errors.Is(err, keyfuncs.ErrMissingHeader):
		detail = "missing rate-limit key: header %s is required"
	case errors.Is(err, keyfuncs.ErrRepeatedHeader):
		detail = "invalid rate-limit key: header %s was sent more than once"
	case errors.Is(err, keyfuncs.ErrValueTooLong):
		detail = "invalid rate-limit key: a value is longer than 1024 bytes"
	case errors.Is(err, keyfuncs.ErrInvalidForwarding):
		detail = "invalid rate-limit key: the forwarding header %s cannot be read"
	case errors.Is(err, keyfuncs.ErrUnidentifiedClient):
		detail = "missing rate-limit key: the Forwarded header does not identify the client"
	case errors.Is(err, keyfuncs.ErrInvalidAddr):
		detail = "missing rate-limit key: the client address is not an IP address"
	case errors.Is(err, keyfuncs.ErrNoUser), errors.Is(err, keyfuncs.ErrEmptyKey):
		detail = "missing rate-limit key: no user identified"
	default:
		detail = "missing or invalid rate-limit key"
	}
	if i := strings.Index(detail, "%s"); i >= 0 {
		var h interface{ Header() string }
		name := "X-Forwarded-For"
		if errors.As(err, &h) {
			name = h.Header()
		}
		detail = detail[:i] + name + detail[i+2:]
	}
	b := append([]byte(`{"type":"about:blank","title":"Bad Request","status":400,"detail":"`), detail...)
	return append(b, `"}`...)
}
