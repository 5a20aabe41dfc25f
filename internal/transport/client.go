package transport

import (
	"runtime"

	"github.com/redis/go-redis/v9"
)

// NilClient reports a nil pointer typed into the client interface, which
// would panic deep inside go-redis at the first call.
func NilClient(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c == nil
	case *redis.ClusterClient:
		return c == nil
	case *redis.Ring:
		return c == nil
	}
	return false
}

// poolSize is the number of connections the client may open to one
// server: a queue's bound on calls in flight.
func poolSize(c redis.UniversalClient) int {
	n := 0
	switch c := c.(type) {
	case *redis.Client:
		if c != nil {
			n = c.Options().PoolSize
		}
	case *redis.ClusterClient:
		if c != nil {
			n = c.Options().PoolSize
		}
	case *redis.Ring:
		if c != nil {
			n = c.Options().PoolSize
		}
	}
	if n <= 0 {
		n = 10 * runtime.GOMAXPROCS(0) // go-redis's default
	}
	return n
}
