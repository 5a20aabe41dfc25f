package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/httprate"
	httprateredis "github.com/go-chi/httprate-redis"
	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	goredisstore "github.com/throttled/throttled/v2/store/goredisstore.v9"
	ulule "github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
	"golang.org/x/time/rate"

	"github.com/sluicehq/ratelimit/core"
)

// Limit is the token bucket every peer is configured with, translated into
// each peer's own vocabulary: Burst tokens, refilled at Rate per Period.
// Window-counting peers (ulule, httprate) get Rate requests per Period.
type Limit struct {
	Rate   int
	Period time.Duration
	Burst  int
}

// Bound is the most a token bucket of this limit may admit over an interval
// d: C + R·d, rounded down.
func (l Limit) Bound(d time.Duration) int {
	return l.Burst + int(float64(l.Rate)*d.Seconds()/l.Period.Seconds())
}

// Worker decides one request for key: allowed, or an error when the peer
// could not decide. A Worker belongs to one goroutine (httprate needs a
// ResponseWriter and a Request of its own); the instance behind it is shared.
type Worker func(ctx context.Context, key string) (allowed bool, err error)

// Instance is one limiter object, as one app instance would hold it.
type Instance struct {
	NewWorker func() Worker
	Close     func()
}

// Peer is a rate-limiting library under comparison.
type Peer struct {
	Name  string
	Redis bool // decides in Redis; false: in process memory
	// New builds one instance with limit lim whose keys start with prefix.
	// Redis peers get a fresh client from env.
	New func(env *Env, lim Limit, prefix string) (*Instance, error)
}

// Env is what peers are built from: the Redis address, and the client
// options every go-redis client here shares so that round trips are counted.
type Env struct {
	Addr  string
	Trips *TripCounter
	// Client, when set, replaces the client a ratelimit instance would
	// make: the auto-pipelining experiment hands in an AutoPipeliner.
	Client func(*redis.Client) (redis.UniversalClient, error)
	// Timeout is ratelimit's Config.Timeout (0: its default, 50ms). No peer
	// bounds a decision that tightly, and on a starved 2-CPU machine a few
	// decisions in ten thousand take longer, open the breaker and turn half
	// a second of decisions into fast FailMode ones; throughput runs raise
	// it so that every decision is the store's.
	Timeout time.Duration
	// Cluster, when set, holds the nodes of a Redis Cluster: ratelimit and
	// redis_rate then get a redis.NewClusterClient (with the same options
	// they get otherwise) and Addr is unused; other peers refuse.
	Cluster []string
	// PlainClient gives ratelimit a client with go-redis's defaults, as
	// plain redis.NewClient makes it, instead of the README's
	// ContextTimeoutEnabled.
	PlainClient bool
	// FailMode, when set, replaces the package's FailMode for ratelimit.
	FailMode core.FailMode
	// Observer, when set, is ratelimit's Config.Observer.
	Observer core.Observer
	// Borrow is ratelimit's Config.Borrow (0: off, its default).
	Borrow time.Duration
	// Borrowed, when set, counts ratelimit's decisions allowed from a
	// borrowed slice (DecisionEvent.Borrowed).
	Borrowed *atomic.Int64
}

// newClient returns a go-redis client with default options (the setup every
// peer's README shows) plus the round-trip counter; tweak adjusts options
// where a peer recommends otherwise.
func (e *Env) newClient(tweak func(*redis.Options)) *redis.Client {
	opt := &redis.Options{Addr: e.Addr}
	if tweak != nil {
		tweak(opt)
	}
	c := redis.NewClient(opt)
	if e.Trips != nil {
		c.AddHook(e.Trips)
	}
	return c
}

// newUniversal is newClient for the peers that also run on a cluster:
// a cluster client to e.Cluster when it is set.
func (e *Env) newUniversal(ctxTimeout bool) redis.UniversalClient {
	if len(e.Cluster) > 0 {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: e.Cluster, ContextTimeoutEnabled: ctxTimeout})
		if e.Trips != nil {
			// Counted on each node's client, where every round trip goes:
			// ratelimit sends its batches to a node's client directly,
			// past the cluster client's hooks.
			c.OnNewNode(func(n *redis.Client) { n.AddHook(e.Trips) })
		}
		return c
	}
	return e.newClient(func(o *redis.Options) { o.ContextTimeoutEnabled = ctxTimeout })
}

// standaloneOnly refuses a cluster for peers built on *redis.Client.
func (e *Env) standaloneOnly(peer string) error {
	if len(e.Cluster) > 0 {
		return fmt.Errorf("bench: %s is not set up for Redis Cluster here", peer)
	}
	return nil
}

// closeAll closes clients, ignoring errors (the benchmark is over).
func closeAll(cs ...interface{ Close() error }) func() {
	return func() {
		for _, c := range cs {
			_ = c.Close()
		}
	}
}

// shared hands every goroutine the same Worker: the peer is safe for
// concurrent use as it is.
func shared(w Worker) func() Worker { return func() Worker { return w } }

// RedisPeers are the libraries that keep their counters in Redis, this
// library first.
var RedisPeers = []Peer{
	{Name: "ratelimit", Redis: true, New: newRatelimitRedis},
	{Name: "redis_rate", Redis: true, New: newRedisRate},
	{Name: "ulule/limiter", Redis: true, New: newUlule},
	{Name: "throttled", Redis: true, New: newThrottled},
	{Name: "httprate-redis", Redis: true, New: newHTTPRateRedis},
}

// MemoryPeers are the in-process limiters, this library first.
var MemoryPeers = []Peer{
	{Name: "ratelimit (memory)", New: newRatelimitMemory},
	{Name: "sethvargo/go-limiter", New: newSethvargo},
	{Name: "x/time/rate map+Mutex", New: newXRateMutex},
	{Name: "x/time/rate sync.Map", New: newXRateSyncMap},
}

// FailMode is the ratelimit FailMode of Redis instances built here. Degraded
// decisions count as errors whatever it is; FailClosed keeps them from
// counting as admitted in the over-admission test.
var FailMode = core.FailClosed

// newRatelimitRedis is ratelimit's default Redis store, set up as its
// README recommends: core.NewRedisStore(client) with only a prefix, on a
// client with ContextTimeoutEnabled (a stalled Redis cannot hold a decision
// past Config.Timeout; not with env.PlainClient) and go-redis's default
// MaxRetries (a re-sent script charges nothing twice).
func newRatelimitRedis(env *Env, lim Limit, prefix string) (*Instance, error) {
	c := env.newUniversal(!env.PlainClient)
	client := c
	if env.Client != nil {
		sc, ok := c.(*redis.Client)
		if !ok {
			c.Close()
			return nil, errors.New("bench: Env.Client wraps a standalone client only")
		}
		var err error
		if client, err = env.Client(sc); err != nil {
			c.Close()
			return nil, err
		}
	}
	fm := FailMode
	if env.FailMode != 0 {
		fm = env.FailMode
	}
	var cause atomic.Pointer[error]
	l, err := core.New(core.Config{
		Store:    core.NewRedisStore(client, core.WithPrefix(prefix)),
		Limit:    core.Limit{Rate: lim.Rate, Period: lim.Period, Burst: lim.Burst},
		FailMode: fm,
		Timeout:  env.Timeout,
		Borrow:   env.Borrow,
		Observer: causeObserver{env.Observer, &cause, env.Borrowed},
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		c.Close()
		return nil, err
	}
	return &Instance{NewWorker: shared(ratelimitWorker(l, &cause)), Close: closeAll(c)}, nil
}

// causeObserver keeps the cause of the last degraded decision, counts
// the decisions allowed from borrowed slices, and passes every event on to
// next (if not nil).
type causeObserver struct {
	next     core.Observer
	cause    *atomic.Pointer[error]
	borrowed *atomic.Int64 // nil: not counted
}

func (o causeObserver) Decision(e core.DecisionEvent) {
	if e.Err != nil {
		// A copy: &e.Err would move every event to the heap, an
		// allocation per decision charged to ratelimit.
		err := e.Err
		o.cause.Store(&err)
	}
	if e.Borrowed && e.Allowed && o.borrowed != nil {
		o.borrowed.Add(1)
	}
	if o.next != nil {
		o.next.Decision(e)
	}
}

func (o causeObserver) BreakerChange(policy string, open bool) {
	if o.next != nil {
		o.next.BreakerChange(policy, open)
	}
}

// ratelimitWorker reports a degraded decision (made by FailMode, not the
// store) as an error, with the cause the Observer last saw.
func ratelimitWorker(l *core.Limiter, cause *atomic.Pointer[error]) Worker {
	return func(ctx context.Context, key string) (bool, error) {
		r, err := l.Allow(ctx, key)
		if err != nil {
			return false, err
		}
		if r.Degraded {
			if p := cause.Load(); p != nil {
				return r.Allowed, *p
			}
			return r.Allowed, errors.New("ratelimit: degraded decision")
		}
		return r.Allowed, nil
	}
}

func newRatelimitMemory(_ *Env, lim Limit, _ string) (*Instance, error) {
	l, err := core.New(core.Config{
		Store:    core.NewMemoryStore(),
		Limit:    core.Limit{Rate: lim.Rate, Period: lim.Period, Burst: lim.Burst},
		FailMode: core.FailOpen,
	})
	if err != nil {
		return nil, err
	}
	// Allow as an app calls it: a memory store never degrades, so
	// ratelimitWorker's account of a cause has nothing to say here.
	w := func(ctx context.Context, key string) (bool, error) {
		r, err := l.Allow(ctx, key)
		return r.Allowed, err
	}
	return &Instance{NewWorker: shared(w), Close: func() {}}, nil
}

func newRedisRate(env *Env, lim Limit, prefix string) (*Instance, error) {
	c := env.newUniversal(false)
	l := redis_rate.NewLimiter(c)
	rl := redis_rate.Limit{Rate: lim.Rate, Burst: lim.Burst, Period: lim.Period}
	w := func(ctx context.Context, key string) (bool, error) {
		res, err := l.Allow(ctx, prefix+key, rl)
		if err != nil {
			return false, err
		}
		return res.Allowed > 0, nil
	}
	return &Instance{NewWorker: shared(w), Close: closeAll(c)}, nil
}

func newUlule(env *Env, lim Limit, prefix string) (*Instance, error) {
	if err := env.standaloneOnly("ulule/limiter"); err != nil {
		return nil, err
	}
	c := env.newClient(nil)
	store, err := ulredis.NewStoreWithOptions(c, ulule.StoreOptions{Prefix: prefix})
	if err != nil {
		c.Close()
		return nil, err
	}
	l := ulule.New(store, ulule.Rate{Period: lim.Period, Limit: int64(lim.Rate)})
	w := func(ctx context.Context, key string) (bool, error) {
		res, err := l.Get(ctx, key)
		if err != nil {
			return false, err
		}
		return !res.Reached, nil
	}
	return &Instance{NewWorker: shared(w), Close: closeAll(c)}, nil
}

func newThrottled(env *Env, lim Limit, prefix string) (*Instance, error) {
	if err := env.standaloneOnly("throttled"); err != nil {
		return nil, err
	}
	c := env.newClient(nil)
	store, err := goredisstore.NewCtx(c, prefix)
	if err != nil {
		c.Close()
		return nil, err
	}
	// throttled's bucket holds MaxBurst+1 requests.
	l, err := throttled.NewGCRARateLimiterCtx(store, throttled.RateQuota{
		MaxRate:  throttled.PerDuration(lim.Rate, lim.Period),
		MaxBurst: lim.Burst - 1,
	})
	if err != nil {
		c.Close()
		return nil, err
	}
	w := func(ctx context.Context, key string) (bool, error) {
		limited, _, err := l.RateLimitCtx(ctx, key, 1)
		if err != nil {
			return false, err
		}
		return !limited, nil
	}
	return &Instance{NewWorker: shared(w), Close: closeAll(c)}, nil
}

func newHTTPRateRedis(env *Env, lim Limit, prefix string) (*Instance, error) {
	if err := env.standaloneOnly("httprate-redis"); err != nil {
		return nil, err
	}
	// The client httprate-redis builds from Host/Port when given none, with
	// its own defaults (PoolSize 10, no retries, 250ms timeouts); passed in
	// only so that round trips are counted like everyone else's.
	c := env.newClient(func(o *redis.Options) {
		o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxRetries = 10, 1, 5, -1
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 500*time.Millisecond, 250*time.Millisecond, 250*time.Millisecond
	})
	var mu sync.Mutex
	var lastErr error
	counter := httprateredis.NewCounter(&httprateredis.Config{
		Client:    c,
		PrefixKey: prefix,
		// Errors fall back to a local counter silently; record them.
		OnError: func(err error) { mu.Lock(); lastErr = err; mu.Unlock() },
	})
	l := httprate.NewRateLimiter(lim.Rate, lim.Period, httprate.WithLimitCounter(counter))
	newWorker := func() Worker {
		w := &headerWriter{h: make(http.Header, 8)}
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = net.JoinHostPort("192.0.2.1", strconv.Itoa(1234))
		return func(ctx context.Context, key string) (bool, error) {
			limited := l.OnLimit(w, r, key)
			var err error
			if counter.IsFallbackActivated() {
				mu.Lock()
				err = fmt.Errorf("httprate-redis: local fallback: %w", lastErr)
				mu.Unlock()
			}
			return !limited, err
		}
	}
	return &Instance{NewWorker: newWorker, Close: closeAll(c)}, nil
}

// headerWriter is the cheapest ResponseWriter httprate can write its headers
// to; a real server would pay for more.
type headerWriter struct{ h http.Header }

func (w *headerWriter) Header() http.Header         { return w.h }
func (w *headerWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *headerWriter) WriteHeader(int)             {}

func newSethvargo(_ *Env, lim Limit, _ string) (*Instance, error) {
	s, err := memorystore.New(&memorystore.Config{Tokens: uint64(lim.Burst), Interval: lim.Period})
	if err != nil {
		return nil, err
	}
	w := func(ctx context.Context, key string) (bool, error) {
		_, _, _, ok, err := s.Take(ctx, key)
		return ok, err
	}
	return &Instance{NewWorker: shared(w), Close: func() { _ = s.Close(context.Background()) }}, nil
}

// newXRateMutex is the map of golang.org/x/time/rate limiters under one
// mutex that most tutorials show.
func newXRateMutex(_ *Env, lim Limit, _ string) (*Instance, error) {
	every := rate.Limit(float64(lim.Rate) / lim.Period.Seconds())
	var mu sync.Mutex
	m := make(map[string]*rate.Limiter)
	w := func(_ context.Context, key string) (bool, error) {
		mu.Lock()
		l, ok := m[key]
		if !ok {
			l = rate.NewLimiter(every, lim.Burst)
			m[key] = l
		}
		mu.Unlock()
		return l.Allow(), nil
	}
	return &Instance{NewWorker: shared(w), Close: func() {}}, nil
}

// newXRateSyncMap is the same with a sync.Map, the usual next step.
func newXRateSyncMap(_ *Env, lim Limit, _ string) (*Instance, error) {
	every := rate.Limit(float64(lim.Rate) / lim.Period.Seconds())
	var m sync.Map
	w := func(_ context.Context, key string) (bool, error) {
		v, ok := m.Load(key)
		if !ok {
			v, _ = m.LoadOrStore(key, rate.NewLimiter(every, lim.Burst))
		}
		return v.(*rate.Limiter).Allow(), nil
	}
	return &Instance{NewWorker: shared(w), Close: func() {}}, nil
}
