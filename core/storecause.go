package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Why a store call failed, said as precisely as the store knows: a
// decision that ran out of time waiting for a Redis that refuses
// connections must report the refusal, not only that it stopped waiting.

// dialWatch is a go-redis hook that keeps a client's last dial error. go-
// redis retries a failed dial with backoff until the caller's deadline,
// which then is all the call returns; the refusal itself only passes here.
type dialWatch struct{ last *atomic.Pointer[dialFailure] }

type dialFailure struct {
	err error
	at  time.Time
}

// dialFresh is how long a dial error explains a failing call: go-redis
// re-dials a refusing server about every second.
const dialFresh = 3 * time.Second

func (w dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		switch {
		case err == nil:
			if w.last.Load() != nil {
				w.last.Store(nil)
			}
		case !isTimeout(err):
			// A dial cut short by the caller's deadline says nothing new.
			w.last.Store(&dialFailure{err: err, at: time.Now()})
		}
		return c, err
	}
}

// ProcessHook and ProcessPipelineHook add nothing to a command's path.
func (dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// watchDials adds w to every connection pool of client: a Cluster's or
// Ring's dials are its nodes'.
func watchDials(client redis.UniversalClient, w dialWatch) {
	switch c := client.(type) {
	case *redis.ClusterClient:
		c.OnNewNode(func(n *redis.Client) { n.AddHook(w) })
	case *redis.Ring:
		c.OnNewNode(func(n *redis.Client) { n.AddHook(w) })
		_ = c.ForEachShard(context.Background(), func(_ context.Context, n *redis.Client) error {
			n.AddHook(w)
			return nil
		})
	default:
		client.AddHook(w)
	}
}

// dialError returns the store's last dial error while it is fresh: its
// server refuses connections (or cannot be resolved or reached).
func (s *RedisStore) dialError() error {
	if f := s.dials.Load(); f != nil && time.Since(f.at) < dialFresh {
		return f.err
	}
	return nil
}

// isTimeout reports an error that says the call ran out of time: a
// context deadline, or a network timeout (go-redis's own read, write and
// dial timeouts, and a connection's deadline set from the context).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// failureCause is what a failed store call under the decision's deadline
// reports (to the Observer, the log and metrics): the dial error when the
// store cannot connect, whatever the call returned; ErrTimeout, with the
// store's own error, when the call ran out of time; else the error.
func failureCause(err error, timedOut bool, dialErr, last error) error {
	if dialErr != nil && (timedOut || isTimeout(err)) {
		return fmt.Errorf("core: the store is unreachable: %w", dialErr)
	}
	if !timedOut && !isTimeout(err) {
		return err
	}
	if last != nil && !isTimeout(last) {
		return fmt.Errorf("%w; the store's last error: %w", ErrTimeout, last)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ErrTimeout
	}
	return fmt.Errorf("%w: %w", ErrTimeout, err)
}
