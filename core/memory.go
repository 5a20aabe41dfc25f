package core

import (
	"context"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// MemoryStore keeps token buckets in this process, with the same semantics
// as RedisStore. It serves single-instance apps, tests, the FailLocal
// fallback and demos; it does not share limits between processes.
//
// Buckets are spread over independently locked shards by subject, so all
// policies of one subject are decided under one lock. Memory is bounded:
// buckets that have refilled completely are swept (a full bucket and a
// missing one are the same), and each shard holds at most its share of
// WithMaxKeys. A new subject arriving at a full shard evicts the sampled
// bucket closest to full (another subject's, unless every sample is its
// own), whose subject then starts again from a full bucket.
//
// A bucket describes itself, as on Redis: it keeps the policy that wrote
// it, so a bucket written under one limit and read under another (the same
// Name, a changed Limit) carries over what was spent, and one stamped
// ahead of an injected clock that moved back is read as of its stamp and
// re-stamped by the next take (DESIGN §3, "Limits that change", "Time
// steps").
//
// A MemoryStore is safe for concurrent use and needs no Close.
type MemoryStore struct {
	table  *bucket.Table // the buckets and their arithmetic
	names  nameBook      // the policy names of the limiters using the store
	leases bucket.Leases // Concurrency's leases (their calls: concurrency_memory.go)

	// The options, read once by NewMemoryStore.
	clock   func() time.Time
	maxKeys int
	sweep   time.Duration
}

// MemoryOption configures a MemoryStore.
type MemoryOption func(*MemoryStore)

// WithClock sets the clock the store reads; default time.Now. Tests inject
// one to move time without sleeping.
func WithClock(now func() time.Time) MemoryOption {
	if now == nil {
		panic("core: WithClock(nil)")
	}
	return func(s *MemoryStore) { s.clock = now }
}

// DefaultMaxKeys is the default bound on buckets held by a MemoryStore:
// at most about 125 MB, 118 bytes a bucket (a 56-byte slot in an array
// that grows by a quarter, and 8-byte index entries kept at least 3/8
// full; subjects' own bytes come on top).
const DefaultMaxKeys = 1 << 20

// WithMaxKeys bounds the number of buckets (one per policy and subject);
// default DefaultMaxKeys. Values below the shard count are raised to it.
func WithMaxKeys(n int) MemoryOption {
	return func(s *MemoryStore) { s.maxKeys = n }
}

// WithSweepInterval sets how often each shard drops buckets that are full
// again; default one minute.
func WithSweepInterval(d time.Duration) MemoryOption {
	return func(s *MemoryStore) { s.sweep = d }
}

// NewMemoryStore returns an empty in-process store.
func NewMemoryStore(opts ...MemoryOption) *MemoryStore {
	s := &MemoryStore{maxKeys: DefaultMaxKeys, sweep: time.Minute}
	for _, o := range opts {
		if o == nil {
			panic("core: nil MemoryOption")
		}
		o(s)
	}
	s.table = bucket.NewTable(s.clock, s.maxKeys, s.sweep)
	return s
}

var _ Store = (*MemoryStore)(nil)

// Len returns the number of buckets held, for tests and metrics.
func (s *MemoryStore) Len() int { return s.table.Len() }

// call decides a at once: arguments are checked, so it never fails.
// OpClear makes a.Subj's buckets full again.
func (s *MemoryStore) call(_ context.Context, a bucket.Ask) (bucket.Outcome, error) {
	if a.Op == bucket.OpClear {
		s.table.Clear(a.Subj, a.Policies)
		return bucket.Outcome{}, nil
	}
	return s.table.Apply(&a), nil
}

func (s *MemoryStore) remote() bool                       { return false }
func (s *MemoryStore) why() (dialErr, last error, _ bool) { return nil, nil, true }
func (s *MemoryStore) breakers() *nodeBreakers            { return nil }
func (s *MemoryStore) unit(string) string                 { return "" }
func (s *MemoryStore) policyNames() *nameBook             { return &s.names }

func (s *MemoryStore) take1(key string, n int, p *bucket.Policy) (bucket.Decision, bool) {
	return s.table.Take1(s.subject(key), n, p), true
}

// subject digests only a long key, and a key starting with '~' (no key
// may spell another's digest): a memory store takes any byte.
func (s *MemoryStore) subject(key string) string {
	if len(key) <= bucket.MaxRawSubject && key[0] != '~' {
		return key
	}
	return bucket.HashSubject(key)
}
