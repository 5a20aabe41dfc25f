package echo

import (
	"github.com/labstack/echo/v4"

	"github.com/sluicehq/ratelimit/internal/adapterkey"
)

// KeyFunc returns the rate-limiting key of a request from echo's context,
// for MiddlewareWithKey: a non-empty key or an error, never "" with a nil
// error. Prefer keyfuncs' KeyFuncs (WithKey) when the request alone holds
// the key.
type KeyFunc func(c echo.Context) (string, error)

// ContextKey returns a KeyFunc that keys a request by the string stored
// under name with c.Set, as a user ID formatted as keyfuncs.User formats
// it ("user:alice"). A missing value, or one that is not a string, is
// keyfuncs.ErrNoUser. An authentication middleware placed before the
// limiter stores the user:
//
//	c.Set("user", claims.Subject)
func ContextKey(name string) KeyFunc { return adapterkey.ContextKey(name, echo.Context.Get) }
