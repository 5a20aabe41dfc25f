package gin

import (
	"github.com/gin-gonic/gin"

	"github.com/sluicehq/ratelimit/internal/adapterkey"
)

// KeyFunc returns the rate-limiting key of a request from gin's context,
// for MiddlewareWithKey: a non-empty key or an error, never "" with a nil
// error. Prefer keyfuncs' KeyFuncs (WithKey) when the request alone holds
// the key.
type KeyFunc func(c *gin.Context) (string, error)

// ContextKey returns a KeyFunc that keys a request by the string stored
// under name with c.Set (c.Keys), as a user ID formatted as keyfuncs.User
// formats it ("user:alice"). A missing value, or one that is not a string,
// is keyfuncs.ErrNoUser; the request's context is not consulted (use
// keyfuncs.ContextValue with WithKey for that). An authentication
// middleware placed before the limiter stores the user:
//
//	c.Set("user", claims.Subject)
func ContextKey(name string) KeyFunc {
	return adapterkey.ContextKey(name, func(c *gin.Context, name string) any { v, _ := c.Get(name); return v })
}
