package core

import (
	"context"
	"fmt"
	"strings"

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
	t      *transport.Store // its calls: queues, scripts, replies
	prefix string           // WithPrefix's, read by NewRedisStore
	names  nameBook         // the policy names of the limiters using the store
	nodes  nodeBreakers     // its breakers, every limiter's on it
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
	s := &RedisStore{prefix: DefaultPrefix}
	for _, o := range opts {
		if o == nil {
			panic("core: nil RedisOption")
		}
		o(s)
	}
	s.t = transport.New(client, s.prefix)
	if s.t.Split() {
		s.nodes.node = s.t.Node
	}
	return s
}

var _ Store = (*RedisStore)(nil)

// Client returns the client the store uses.
func (s *RedisStore) Client() redis.UniversalClient { return s.t.Client() }

// Key returns the Redis key of the bucket a Limiter on this store keeps
// for the key subject under the named policy.
func (s *RedisStore) Key(name, subject string) string {
	return s.t.Key(bucket.HashSubject(subject), name)
}

// Preload loads the store's scripts (decisions, in-flight leases) into
// Redis — every primary of a Cluster, every shard of a Ring — so the first
// decisions need no EVAL. It also tells whether Redis answers: call it
// from a readiness check or at startup, with a deadline. Decisions never
// depend on it: a script cache emptied later (restart, failover, SCRIPT
// FLUSH) is refilled on demand.
func (s *RedisStore) Preload(ctx context.Context) error {
	return s.t.Preload(ctx, transport.AcquireLease, transport.AcquireWithRate, transport.RenewLeases)
}

// call decides a, once checked, through the transport, by a.Deadline
// (see transport.Store.Do); OpClear deletes a.Subj's buckets.
func (s *RedisStore) call(ctx context.Context, a bucket.Ask) (bucket.Outcome, error) {
	if err := checkAsk(&a); err != nil {
		return bucket.Outcome{}, err
	}
	if a.Op == bucket.OpClear {
		return bucket.Outcome{}, s.t.Clear(ctx, a.Subj, a.Policies)
	}
	o, err := s.t.Do(ctx, a)
	return o, storeErr(err)
}

func (s *RedisStore) remote() bool              { return true }
func (s *RedisStore) subject(key string) string { return bucket.HashSubject(key) }
func (s *RedisStore) policyNames() *nameBook    { return &s.names }
func (s *RedisStore) take1(string, int, *bucket.Policy) (bucket.Decision, bool) {
	return bucket.Decision{}, false
}

func (s *RedisStore) why() (dialErr, last error, told bool) {
	dialErr, last = s.t.Why()
	return dialErr, last, true
}

func (s *RedisStore) unit(subj string) string { return s.t.Unit(subj) }

func (s *RedisStore) breakers() *nodeBreakers { return &s.nodes }
