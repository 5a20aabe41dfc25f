package core

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisStore keeps token buckets in Redis and decides with one Lua script
// call per decision (EVALSHA; EVAL only after a NOSCRIPT reply), or, with
// WithBatching, one per batch of concurrent decisions, so concurrent
// instances share one exact limit. It works with every redis.UniversalClient:
// a standalone client, Sentinel (failover) client, Cluster or Ring.
//
// Keys are laid out as <prefix>{<subject>}:<policy>. The braces are a Redis
// Cluster hash tag: every policy of one subject lives in one slot, so a
// multi-policy decision stays one script. Subjects longer than 64 bytes, or
// holding '{', '}' or a leading '~', are replaced by '~' and a SHA-256 hex
// digest, so no subject can aim at another subject's bucket. Each key
// expires a second after its bucket would be full again.
//
// go-redis re-sends a command whose connection failed after it was sent
// (up to the client's MaxRetries, default 3). For this script that means a
// decision whose reply was lost can be counted twice: never admitting more,
// but possibly denying early. Give the store a client with MaxRetries: -1
// to have such a failure decided by the limiter's FailMode instead.
//
// A RedisStore is safe for concurrent use. It never closes the client.
type RedisStore struct {
	client redis.UniversalClient
	prefix string
	batch  *batcher // WithBatching; nil: every decision sent on its own
}

// RedisOption configures a RedisStore.
type RedisOption func(*RedisStore)

// DefaultPrefix starts every key a RedisStore writes.
const DefaultPrefix = "ratelimit:"

// WithPrefix sets the key prefix; default DefaultPrefix. It must not contain
// '{' or '}' (they would move the Cluster hash tag); NewRedisStore panics
// if it does.
func WithPrefix(prefix string) RedisOption {
	if strings.ContainsAny(prefix, "{}") {
		panic(fmt.Sprintf("core: WithPrefix(%q): a prefix must not contain '{' or '}'", prefix))
	}
	return func(s *RedisStore) { s.prefix = prefix }
}

// NewRedisStore returns a store using client. It does not dial: an
// unreachable Redis at startup is a failing store, handled by FailMode.
func NewRedisStore(client redis.UniversalClient, opts ...RedisOption) *RedisStore {
	if client == nil {
		panic("core: NewRedisStore(nil)")
	}
	s := &RedisStore{client: client, prefix: DefaultPrefix}
	for _, o := range opts {
		if o == nil {
			panic("core: nil RedisOption")
		}
		o(s)
	}
	return s
}

var _ Store = (*RedisStore)(nil)

// Client returns the client the store uses.
func (s *RedisStore) Client() redis.UniversalClient { return s.client }

// Key returns the Redis key of subject's bucket under the named policy.
func (s *RedisStore) Key(name, subject string) string {
	return s.key(hashSubject(subject), name)
}

// key lays out the key of a subject already passed through hashSubject.
func (s *RedisStore) key(subj, name string) string {
	return s.prefix + "{" + subj + "}:" + name
}

// keys returns the keys of subj's buckets under every policy, in order.
func (s *RedisStore) keys(subj string, policies []Policy) []string {
	keys := make([]string, len(policies))
	for i := range policies {
		keys[i] = s.key(subj, policies[i].Name)
	}
	return keys
}

// maxRawSubject is the longest subject used in a key as it is.
const maxRawSubject = 64

// hashSubject returns subject, or a digest of it when it is long or could
// break or forge the hash tag. Digests start with '~', and raw subjects
// starting with '~' are digested too, so the two forms never meet.
func hashSubject(subject string) string {
	if len(subject) <= maxRawSubject && !strings.ContainsAny(subject, "{}") && !strings.HasPrefix(subject, "~") {
		return subject
	}
	sum := sha256.Sum256([]byte(subject))
	return "~" + hex.EncodeToString(sum[:16])
}

// Take implements Store with one script call.
func (s *RedisStore) Take(ctx context.Context, subject string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	if err := checkTake(subject, n, policies); err != nil {
		return Outcome{}, err
	}
	subj := hashSubject(subject)
	if s.batch != nil {
		return s.takeBatched(ctx, subj, n, policies, each)
	}
	var keys []string
	var args []any
	if len(policies) == 1 {
		keys = []string{s.key(subj, policies[0].Name)}
		if n == 1 && policies[0].argv1 != nil {
			args = policies[0].argv1
		}
	} else {
		keys = s.keys(subj, policies)
	}
	if args == nil {
		args = scriptArgs(n, policies)
	}
	reply, err := tokenBucket.Run(ctx, s.client, keys, args...).Slice()
	if err != nil {
		return Outcome{}, err
	}
	return parseReply(reply, each)
}

// scriptArgs returns the script's ARGV for cost n under policies.
func scriptArgs(n int, policies []Policy) []any {
	args := make([]any, 1, 1+3*len(policies))
	args[0] = n
	for i := range policies {
		args = append(args, policies[i].Capacity, policies[i].Refill, policies[i].Unit)
	}
	return args
}

func parseReply(reply []any, each []Outcome) (Outcome, error) {
	if len(reply) < 4 || (len(reply)-1)%3 != 0 || (each != nil && len(each) != (len(reply)-1)/3) {
		return Outcome{}, fmt.Errorf("%w: %d values", ErrBadReply, len(reply))
	}
	allowed, ok := reply[0].(int64)
	if !ok {
		return Outcome{}, fmt.Errorf("%w: %T", ErrBadReply, reply[0])
	}
	var best Outcome
	for i := 0; 1+3*i < len(reply); i++ {
		rem, ok1 := reply[1+3*i].(int64)
		retry, ok2 := reply[2+3*i].(int64)
		reset, ok3 := reply[3+3*i].(int64)
		if !ok1 || !ok2 || !ok3 {
			return Outcome{}, fmt.Errorf("%w: non-integer value", ErrBadReply)
		}
		o := Outcome{
			Allowed:    allowed == 1,
			Policy:     i,
			Remaining:  rem,
			RetryAfter: time.Duration(retry) * time.Microsecond,
			ResetAfter: time.Duration(reset) * time.Microsecond,
		}
		if each != nil {
			each[i] = o
		}
		if i == 0 || binds(o, best) {
			best = o
		}
	}
	return best, nil
}

// Reset implements Resetter: it deletes subject's buckets, which are then full.
func (s *RedisStore) Reset(ctx context.Context, subject string, policies []Policy) error {
	return s.client.Del(ctx, s.keys(hashSubject(subject), policies)...).Err()
}

// Preload loads the decision script into Redis — every primary of a
// Cluster, every shard of a Ring — so the first decisions need no EVAL. It
// also tells whether Redis answers: call it from a readiness check or at
// startup, with a deadline. Decisions never depend on it: a script cache
// emptied later (restart, failover, SCRIPT FLUSH) is refilled on demand.
func (s *RedisStore) Preload(ctx context.Context) error {
	load := func(ctx context.Context, c redis.Scripter) error { return tokenBucket.Load(ctx, c).Err() }
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, shard *redis.Client) error { return load(ctx, shard) })
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, shard *redis.Client) error { return load(ctx, shard) })
	}
	return load(ctx, s.client)
}
