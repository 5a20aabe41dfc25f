package echo

import (
	"net/http"

	"github.com/labstack/echo/v5"

	"github.com/sluicehq/ratelimit/keyfuncs"
)

// KeyFunc returns the rate-limiting key of a request from echo's context,
// for MiddlewareWithKey: a non-empty key or an error, never "" with a nil
// error. Prefer keyfuncs' KeyFuncs (WithKey) when the request alone holds
// the key.
type KeyFunc func(c *echo.Context) (string, error)

// ContextKey returns a KeyFunc that keys a request by the string stored
// under name with c.Set, as a user ID formatted as keyfuncs.User formats
// it ("user:alice"). A missing value, or one that is not a string, is
// keyfuncs.ErrNoUser. An authentication middleware placed before the
// limiter stores the user:
//
//	c.Set("user", claims.Subject)
func ContextKey(name string) KeyFunc {
	return func(c *echo.Context) (string, error) {
		id, ok := c.Get(name).(string)
		if !ok {
			return "", keyfuncs.ErrNoUser
		}
		return keyfuncs.User(func(*http.Request) (string, error) { return id, nil })(c.Request())
	}
}
