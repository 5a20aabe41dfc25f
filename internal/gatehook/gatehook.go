// Package gatehook lets this module's tests reach settings of package
// nethttp that are not public API, because only tests need them (STYLE.md
// §11). Package nethttp fills it in when it is loaded.
package gatehook

import "time"

// WithClock returns a nethttp.Option (assert it: gatehook cannot import
// nethttp) that sets the clock HeadersLegacy reads for X-RateLimit-Reset;
// the default is time.Now.
var WithClock func(now func() time.Time) any
