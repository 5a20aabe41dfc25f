package transport

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Why a store call failed, said as precisely as the store knows: a
// decision that ran out of time waiting for a Redis that refuses
// connections must report the refusal, not only that it stopped waiting
// (core's failureCause says it, from Store.Why and IsTimeout).

// lastDial keeps a client's last dial error (see Watch).
type lastDial struct{ last atomic.Pointer[dialFailure] }

type dialFailure struct {
	err error
	at  time.Time
}

// dialFresh is how long a dial error explains a failing call: go-redis
// re-dials a refusing server about every second.
const dialFresh = 3 * time.Second

// Watch adds a hook keeping the last dial error to every connection pool
// of client: a Cluster's or Ring's dials are its nodes'. go-redis retries
// a failed dial with backoff until the caller's deadline, which then is
// all the call returns; the refusal itself only passes the hook.
func (d *lastDial) Watch(client redis.UniversalClient) {
	w := dialWatch{&d.last}
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

// Err returns the last dial error while it is fresh: the server refuses
// connections (or cannot be resolved or reached).
func (d *lastDial) Err() error {
	if f := d.last.Load(); f != nil && time.Since(f.at) < dialFresh {
		return f.err
	}
	return nil
}

// dialWatch is the go-redis hook of lastDial.
type dialWatch struct{ last *atomic.Pointer[dialFailure] }

func (w dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		switch {
		case err == nil:
			if w.last.Load() != nil {
				w.last.Store(nil)
			}
		case !IsTimeout(err):
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

// IsTimeout reports an error that says the call ran out of time: a
// context deadline, or a network timeout (go-redis's own read, write and
// dial timeouts, and a connection's deadline set from the context).
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// SlotMoving reports a Redis Cluster answer about one slot being moved
// (TRYAGAIN while its keys are split between two nodes, or a redirection
// go-redis did not follow), not about the node's health.
func SlotMoving(err error) bool {
	return errors.Is(err, errSlotsSplit) || redis.HasErrorPrefix(err, "TRYAGAIN") || redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")
}

// notRun reports a Redis answer that the script was not run: the node
// lacks it, or does not own the slot.
func notRun(err error) bool {
	return redis.HasErrorPrefix(err, "NOSCRIPT") || SlotMoving(err) || redis.HasErrorPrefix(err, "CLUSTERDOWN")
}

// noScriptFlags reports a server that cannot run TokenBucketsAcross, a
// script flagged in its shebang that reaches keys it did not declare, on
// any call: Redis before 7 fails to compile it; Dragonfly refuses a flag
// it does not know ("Invalid flag: allow-cross-slot-keys", from
// ScriptParams::ApplyFlags in its src/server/script_mgr.cc) or, taking
// it, the first key the script did not declare ("script tried accessing
// undeclared key", dragonflydb/dragonfly#3212 and #3245; unless it runs
// with --default_lua_flags=allow-undeclared-keys), raised by the script's
// first read, before it wrote anything. Its batches go per subject.
func noScriptFlags(err error) bool {
	return redis.HasErrorPrefix(err, "Error compiling script") || redis.HasErrorPrefix(err, "Unexpected flag") ||
		redis.HasErrorPrefix(err, "Invalid flag") || undeclaredKey(err)
}

// undeclaredKey reports Dragonfly's refusal of a key a script did not
// declare, which it words "script tried accessing undeclared key" (newer
// versions add ", key: <key>") inside its error running the script: "ERR
// Error running script (call to <sha>): @user_script:<line>: script tried
// accessing undeclared key".
func undeclaredKey(err error) bool {
	var rErr redis.Error
	return errors.As(err, &rErr) && strings.Contains(rErr.Error(), "tried accessing undeclared key")
}
