// Package adapterkey holds the code the adapters share, so it is written
// once: ContextKey of echo, echo/v5 and gin, and the checks of a WithAlso
// request in nethttp and grpc.
package adapterkey

import "github.com/sluicehq/ratelimit/keyfuncs"

// ContextKey returns the key function of an adapter's ContextKey(name):
// the string get(c, name) returns from the router's context, formatted as
// keyfuncs.User formats it (keyfuncs.UserKey); a missing value, or one
// that is not a string, is keyfuncs.ErrNoUser.
func ContextKey[C any](name string, get func(c C, name string) any) func(C) (string, error) {
	return func(c C) (string, error) {
		id, ok := get(c, name).(string)
		if !ok {
			return "", keyfuncs.ErrNoUser
		}
		return keyfuncs.UserKey(id)
	}
}
