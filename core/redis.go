package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/transport"
)

// RedisStore keeps token buckets in Redis, so concurrent instances share
// one exact limit. Every decision is made by one Lua script on the Redis
// server, with time from the server's clock. It works with every
// redis.UniversalClient: a standalone client, Sentinel (failover) client,
// Cluster or Ring.
//
// Decisions batch themselves: one made while nothing is in flight is sent
// at once, alone; decisions that arrive while calls are in flight leave in
// the next call at once, together with whatever else queued by then. No
// timer, no delay for a lone caller: a decision waits for one round trip,
// and for another call's only when as many calls as the client has
// connections (its PoolSize) are out, until the first comes back; under
// load Redis and the client spend much less per decision. Each decision in a batch is exactly what it
// would be alone. A Cluster or Ring batches per node (a pipeline of one
// script call per subject), so one node's trouble never holds up
// another's decisions.
//
// Keys are laid out as <prefix>{<subject>}:<policy>. The braces are a Redis
// Cluster hash tag: every policy of one subject lives in one slot, so a
// multi-policy decision stays one script. Subjects longer than 64 bytes, or
// holding '{', '}' or a leading '~', are replaced by '~' and a SHA-256 hex
// digest, so no subject can aim at another subject's bucket. Each key
// expires a second after its bucket would be full again.
//
// A decision is charged at most once even when go-redis re-sends a script
// whose reply was lost (its default MaxRetries): each call carries an id,
// and the script keeps the reply of a call that wrote anything under it
// for a few seconds, so a re-sent call gets the answers of its first run.
//
// Recommended client options: ContextTimeoutEnabled: true, so a stalled
// Redis frees the connection at the decision's deadline; the default
// MaxRetries is safe.
//
// A RedisStore is safe for concurrent use. It never closes the client.
type RedisStore struct {
	client redis.UniversalClient
	prefix string

	mu        sync.Mutex
	queues    map[string]*queue // by node for a Cluster or Ring, else one, ""
	split     bool              // Cluster or Ring: decisions queue per node
	noAcross  atomic.Bool       // a Cluster node refused tokenBucketsAcross (Redis before 7)
	maxCalls  int               // calls in flight per queue: the client's pool
	deadlines bool              // the client bounds calls by their context's deadline
	ready     atomic.Bool       // a call succeeded: a Cluster client has its slot map

	lastErr  atomic.Pointer[error] // the last call's error; nil after a success
	last     lastCall              // the last call (a Cluster's or Ring's: before the slot map)
	nodeLast sync.Map              // Cluster, Ring: node address → *lastCall, its last call
	running  atomic.Int64          // decisions queued or in a call (see runBounded)
	clock    transport.Clock       // the deadlines of calls (see batchContext)
	dials    transport.Dials       // the client's last dial error

	idBase string        // random, per store: call ids never repeat across instances
	idSeq  atomic.Uint64 // call ids within this store

	names nameBook // the policy names of the limiters using the store
}

// RedisOption configures a RedisStore.
type RedisOption func(*RedisStore)

// DefaultPrefix starts every key a RedisStore writes.
const DefaultPrefix = "ratelimit:"

// WithPrefix sets the key prefix; default DefaultPrefix. Give each app
// sharing a Redis its own prefix. It must not contain '{' or '}' (they
// would move the Cluster hash tag); NewRedisStore panics if it does.
func WithPrefix(prefix string) RedisOption {
	if strings.ContainsAny(prefix, "{}") {
		panic(fmt.Sprintf("core: WithPrefix(%q): a prefix must not contain '{' or '}'", prefix))
	}
	return func(s *RedisStore) { s.prefix = prefix }
}

// NewRedisStore returns a store using client. It does not dial: an
// unreachable Redis at startup is a failing store, handled by FailMode.
//
// Recommended: a client with ContextTimeoutEnabled, so a stalled Redis
// frees its connections at each decision's deadline, e.g.
//
//	redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
func NewRedisStore(client redis.UniversalClient, opts ...RedisOption) *RedisStore {
	if client == nil {
		panic("core: NewRedisStore(nil)")
	}
	s := &RedisStore{client: client, prefix: DefaultPrefix, queues: make(map[string]*queue)}
	for _, o := range opts {
		if o == nil {
			panic("core: nil RedisOption")
		}
		o(s)
	}
	switch c := client.(type) {
	case *redis.Client:
		s.deadlines = c != nil && c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		s.split = c != nil
		s.deadlines = c != nil && c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		s.split = c != nil
		s.deadlines = c != nil && c.Options().ContextTimeoutEnabled
	}
	s.maxCalls = transport.PoolSize(client)
	if !transport.NilClient(client) {
		s.dials.Watch(client)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	s.idBase = hex.EncodeToString(b[:]) + "."
	return s
}

var _ Store = (*RedisStore)(nil)

// cause returns the error of the store's last call, if it failed: the
// reason behind a decision that timed out waiting (a dial error, say).
func (s *RedisStore) cause() error {
	if p := s.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Client returns the client the store uses.
func (s *RedisStore) Client() redis.UniversalClient { return s.client }

// Key returns the Redis key of the bucket a Limiter on this store keeps
// for the key subject under the named policy.
func (s *RedisStore) Key(name, subject string) string {
	return s.key(transport.HashSubject(subject), name)
}

// key lays out the key of a subject already passed through transport.HashSubject.
func (s *RedisStore) key(subj, name string) string {
	return s.prefix + "{" + subj + "}:" + name
}

// do queues the request of a (its subject as the store keys it:
// transport.HashSubject's) and waits for its answer, at most until a.Deadline
// (zero: none) or until ctx is cancelled.
// With a.Bound > 0, it refuses (ErrOverloaded) a request that would make
// more than bound decisions running in the store: queued, or in a call,
// including calls that outlive their callers' deadlines.
func (s *RedisStore) do(ctx context.Context, a bucket.Ask) (bucket.Outcome, error) {
	if err := bucket.CheckOp(a.Op, a.Subj, a.N, a.Policies); err != nil {
		return bucket.Outcome{}, err
	}
	if !admit(&s.running, a.Bound) {
		return bucket.Outcome{}, ErrOverloaded
	}
	r := newRequest(ctx, a.Deadline, a.Op, a.Subj, a.N, a.Policies)
	var dest string
	if s.split {
		dest = s.node(a.Subj)
	}
	if s.alone(r, dest) {
		s.sendAlone(r, dest)
	} else {
		s.enqueue(r, dest)
		if err := wait(ctx, a.Deadline, r); err != nil {
			return bucket.Outcome{}, err // r may still be in a call: not reused
		}
	}
	defer r.release()
	if r.err != nil {
		return bucket.Outcome{}, r.err
	}
	return parseReply(r.reply, a.Each)
}

// admit counts one more in running unless bound (> 0) are already
// counted; the count never passes the bound, even for a moment.
func admit(running *atomic.Int64, bound int64) bool {
	for {
		n := running.Load()
		if bound > 0 && n >= bound {
			return false
		}
		if running.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// wait waits for r's answer until deadline or ctx's cancellation; a request not yet sent then
// never is.
func wait(ctx context.Context, deadline time.Time, r *request) error {
	// The deadline's own timer wakes us in one hop; ctx.Done closes from a
	// goroutine that AfterFunc starts, one hop later on a busy machine.
	var expired <-chan time.Time
	if !deadline.IsZero() {
		if r.timer == nil {
			r.timer = time.NewTimer(time.Until(deadline))
		} else {
			r.timer.Reset(time.Until(deadline))
		}
		defer r.timer.Stop()
		expired = r.timer.C
	}
	select {
	case <-r.done:
		return nil
	case <-expired:
	case <-ctx.Done():
	}
	r.gone.Store(true)
	select {
	case <-r.done: // answered as we gave up: use it
		return nil
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

// node names the Redis server that decides subject: its address for a
// Cluster (the primary of its slot) or Ring (its shard), else "". The
// Limiter keeps a circuit breaker per node.
//
// Before the store's first answer a ClusterClient may not have its slot
// map, and asking for it would block on the network: until then, "".
func (s *RedisStore) node(subj string) string {
	if c := s.nodeClient(subj); c != nil {
		return c.Options().Addr
	}
	return ""
}

// parseReply reads one request's part of the script's reply: allowed,
// then per policy whole tokens left, µs until n tokens exist and µs until
// the bucket is full, separated by commas, and for a waiting operation
// one more field (bucket.Outcome.Extra). It returns the binding outcome and fills
// each (when not nil) with every policy's.
func parseReply(reply string, each []bucket.Outcome) (bucket.Outcome, error) {
	var v [3]int64
	allowed, rest, ok := transport.NextInt(reply)
	if !ok || rest == "" {
		return bucket.Outcome{}, fmt.Errorf("%w: %q", ErrBadReply, transport.Truncate(reply))
	}
	var best bucket.Outcome
	for i := 0; rest != ""; i++ {
		for j := range v {
			if v[j], rest, ok = transport.NextInt(rest); !ok {
				return bucket.Outcome{}, fmt.Errorf("%w: %q", ErrBadReply, transport.Truncate(reply))
			}
			if j == 0 && i > 0 && rest == "" {
				best.Extra = v[0]
				return best, nil
			}
		}
		o := bucket.Outcome{
			Allowed:    allowed == 1,
			Policy:     i,
			Remaining:  v[0],
			RetryAfter: time.Duration(v[1]) * time.Microsecond,
			ResetAfter: time.Duration(v[2]) * time.Microsecond,
		}
		if each != nil {
			if i >= len(each) {
				return bucket.Outcome{}, fmt.Errorf("%w: more outcomes than %d policies", ErrBadReply, len(each))
			}
			each[i] = o
		}
		if i == 0 || bucket.Binds(o, best) {
			best = o
		}
	}
	return best, nil
}

// clear deletes subj's buckets (subj as the store keys it).
func (s *RedisStore) clear(ctx context.Context, subj string, policies []bucket.Policy) error {
	keys := make([]string, len(policies))
	for i := range policies {
		keys[i] = s.key(subj, policies[i].Name)
	}
	return s.client.Del(ctx, keys...).Err()
}

// Preload loads the store's scripts (decisions, in-flight leases) into
// Redis — every primary of a Cluster, every shard of a Ring — so the first
// decisions need no EVAL. It also tells whether Redis answers: call it
// from a readiness check or at startup, with a deadline. Decisions never
// depend on it: a script cache emptied later (restart, failover, SCRIPT
// FLUSH) is refilled on demand.
func (s *RedisStore) Preload(ctx context.Context) error {
	_, cluster := s.client.(*redis.ClusterClient)
	load := func(ctx context.Context, c redis.Scripter) error {
		for _, sc := range []*redis.Script{transport.TokenBuckets, acquireLease, acquireWithRate, renewLeases} {
			if err := sc.Load(ctx, c).Err(); err != nil {
				return err
			}
		}
		if !cluster {
			return nil
		}
		if err := transport.TokenBucketsAcross.Load(ctx, c).Err(); !transport.NoScriptFlags(err) {
			return err
		}
		return nil // before Redis 7: batches go per subject
	}
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, shard *redis.Client) error { return load(ctx, shard) })
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, shard *redis.Client) error { return load(ctx, shard) })
	}
	return load(ctx, s.client)
}
