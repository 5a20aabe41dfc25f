package transport

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// errSlotsSplit is a decision across subjects that its Cluster node
// could not run in one call: a slot on the move, or Redis before 7
// (whose decisions across subjects go one subject a call: see Unit).
var errSlotsSplit = errors.New("core: a decision across subjects met a Cluster slot on the move")

// Store carries core.RedisStore's calls to one client (see its doc for
// what a caller sees): the decisions' queues and carriers, their
// encoding into script calls and their replies, and the bound, deadline
// and evidence of every call.
type Store struct {
	client redis.UniversalClient
	prefix string

	mu        sync.Mutex
	queues    map[string]*queue // by node for a Cluster or Ring, else one, ""
	split     bool              // Cluster or Ring: decisions queue per node
	noAcross  atomic.Bool       // a Cluster node refused TokenBucketsAcross (Redis before 7)
	maxCalls  int               // calls in flight per queue: the client's pool
	deadlines bool              // the client bounds calls by their context's deadline
	ready     atomic.Bool       // a call succeeded: a Cluster client has its slot map

	lastErr  atomic.Pointer[error] // the last call's error; nil after a success
	last     lastCall              // the last call (a Cluster's or Ring's: before the slot map)
	nodeLast sync.Map              // Cluster, Ring: node address → *lastCall, its last call
	running  atomic.Int64          // decisions queued or in a call (see Admit)
	clock    deadlineClock         // the deadlines of calls (see batchContext)
	dials    lastDial              // the client's last dial error

	idBase string        // random, per store: call ids never repeat across instances
	idSeq  atomic.Uint64 // call ids within this store
}

// New returns the transport of client, whose keys start with prefix.
func New(client redis.UniversalClient, prefix string) *Store {
	s := &Store{client: client, prefix: prefix, queues: make(map[string]*queue)}
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
	s.maxCalls = poolSize(client)
	if !NilClient(client) {
		s.dials.Watch(client)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	s.idBase = hex.EncodeToString(b[:]) + "."
	return s
}

// Client returns the client the store uses.
func (s *Store) Client() redis.UniversalClient { return s.client }

// Key lays out the key of a subject already passed through bucket.HashSubject:
// <prefix>{<subj>}:<name>.
func (s *Store) Key(subj, name string) string {
	return s.prefix + "{" + subj + "}:" + name
}

// Why returns the store's account of its failures: the client's fresh
// dial error, and the error of its last call (nil when it succeeded) —
// the reason behind a decision that timed out waiting.
func (s *Store) Why() (dialErr, last error) {
	dialErr = s.dials.Err()
	if p := s.lastErr.Load(); p != nil {
		last = *p
	}
	return dialErr, last
}

// Split reports a Cluster or Ring client: its decisions queue per node
// (see Node).
func (s *Store) Split() bool { return s.split }

// Do decides a (checked: see core's checkAsk; its subject as the store
// keys it: bucket.HashSubject's): it queues its request and waits for its
// answer, at most until a.Deadline (zero: none) or until ctx is
// cancelled. A decision across subjects (a.Across) is one script call,
// atomic: every subject must be of the node of a.Subj (see Unit).
// With a.Bound > 0, it refuses (bucket.Overloaded) a request that would make
// more than bound decisions running in the store: queued, or in a call,
// including calls that outlive their callers' deadlines.
func (s *Store) Do(ctx context.Context, a bucket.Ask) (bucket.Outcome, error) {
	if !Admit(&s.running, a.Bound) {
		return bucket.Outcome{}, bucket.Overloaded
	}
	r := newRequest(ctx, a)
	var dest string
	if s.split {
		dest = s.Node(a.Subj)
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
	return ParseReply(r.reply, a.Each)
}

// Admit counts one more in running unless bound (> 0) are already
// counted; the count never passes the bound, even for a moment.
func Admit(running *atomic.Int64, bound int64) bool {
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

// Node names the Redis server that decides subject: its address for a
// Cluster (the primary of its slot) or Ring (its shard), else "". The
// store keeps a circuit breaker per node (core's nodeBreakers), shared by
// every limiter on it.
//
// Before the store's first answer a ClusterClient may not have its slot
// map, and asking for it would block on the network: until then, "".
func (s *Store) Node(subj string) string {
	if c := s.nodeClient(subj); c != nil {
		return c.Options().Addr
	}
	return ""
}

// Unit names what one decision across subjects (bucket.Ask.Across) may
// span, atomically, in one script call: every subject of a standalone
// Redis or Sentinel (""), a Ring shard's or a Cluster node's (Redis 7 and
// later: see TokenBucketsAcross); one subject alone on a Cluster before
// Redis 7, and before the store knows its nodes (see Node).
func (s *Store) Unit(subj string) string {
	if !s.split {
		return ""
	}
	node := s.Node(subj)
	if _, ok := s.client.(*redis.ClusterClient); node == "" || ok && s.noAcross.Load() {
		return node + " " + subj
	}
	return node
}

// Clear deletes subj's buckets (subj as the store keys it).
func (s *Store) Clear(ctx context.Context, subj string, policies []bucket.Policy) error {
	keys := make([]string, len(policies))
	for i := range policies {
		keys[i] = s.Key(subj, policies[i].Name)
	}
	return s.client.Del(ctx, keys...).Err()
}

// Preload loads TokenBuckets and scripts into Redis — every primary of a
// Cluster, every shard of a Ring — and TokenBucketsAcross into a
// Cluster's where the server takes it (see core.RedisStore.Preload).
func (s *Store) Preload(ctx context.Context, scripts ...*redis.Script) error {
	_, cluster := s.client.(*redis.ClusterClient)
	load := func(ctx context.Context, c redis.Scripter) error {
		if err := TokenBuckets.Load(ctx, c).Err(); err != nil {
			return err
		}
		for _, sc := range scripts {
			if err := sc.Load(ctx, c).Err(); err != nil {
				return err
			}
		}
		if !cluster {
			return nil
		}
		if err := TokenBucketsAcross.Load(ctx, c).Err(); !noScriptFlags(err) {
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

// For the lease calls (leases.go), which are bounded, timed and counted
// as decisions are.

// enter counts one more call running in the store unless bound (> 0)
// already run (see Admit); leave ends it.
func (s *Store) enter(bound int64) bool { return Admit(&s.running, bound) }

// leave ends a call enter counted.
func (s *Store) leave() { s.running.Add(-1) }

// lastToSubj returns the last call to the node of subj (see lastTo).
func (s *Store) lastToSubj(subj string) *lastCall {
	var dest string
	if s.split {
		dest = s.Node(subj)
	}
	return s.lastTo(dest)
}

// fast reports a call that may run on its caller's goroutine under its
// caller's deadline, as alone does for a decision: the client honours
// deadlines, nothing else runs in the store, and the last call to its
// node succeeded in under a quarter of the time left.
func (s *Store) fast(last *lastCall, deadline time.Time) bool {
	return s.deadlines && s.running.Load() == 1 && !last.failed.Load() && 4*time.Duration(last.took.Load()) < time.Until(deadline)
}

// run runs f under ctx and keeps how it went, as send does for a
// decision call: in last, and as the store's last error (the evidence a
// guard's breaker reads). A call cut short by its caller's own deadline
// (cut, not zero: it ran on the caller's goroutine) was slow, not
// failing: it is not the store's last error, but sends the next calls to
// its node by goroutine, under minSend.
func (s *Store) run(ctx context.Context, last *lastCall, f func(context.Context) error, cut time.Time) error {
	start := time.Now()
	err := f(ctx)
	last.took.Store(int64(time.Since(start)))
	if last.failed.Load() != (err != nil) {
		last.failed.Store(err != nil)
	}
	switch {
	case err == nil:
		if s.lastErr.Load() != nil {
			s.lastErr.Store(nil)
		}
	case !cut.IsZero() && IsTimeout(err) && !time.Now().Before(cut):
	default:
		s.lastErr.Store(&err)
	}
	return err
}

// Running is how many decisions and calls the store has queued or in a
// call.
func (s *Store) Running() int64 { return s.running.Load() }

// Encode returns the keys and arguments of TokenBuckets call number call
// deciding asks, of one node, as one batch, as send makes them; short:
// as a lone take under one policy is sent, in three arguments. For
// core's test of every script under Lua 5.1 and 5.4.
func (s *Store) Encode(ctx context.Context, call uint64, short bool, asks ...bucket.Ask) ([]string, []any) {
	batch := make([]*request, len(asks))
	for i, a := range asks {
		batch[i] = &request{ctx: ctx, Ask: a}
	}
	if short {
		return s.encodeShort(ctx, call, batch)
	}
	return s.encode(ctx, call, batch)
}
